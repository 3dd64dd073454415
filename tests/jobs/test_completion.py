"""Tab completion of the whole command line: subcommands, then each subcommand's flags and
run ids; `trainstack launch ...` stays Hydra's. Asked as the installed script asks
(`trainstack -sc query=<shell>` with $COMP_LINE), and once through bash itself."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.backends import run_state
from jobs.backends.base import STATES
from jobs.commands import COMMANDS

BIN = Path(sys.executable).parent


@pytest.fixture
def two_runs(workdir: Path) -> Path:
    """A local run in a sweep and a rendered run, as their backends leave them."""
    run_state.write_state(
        workdir / "runs" / "mine1",
        {"run_id": "mine1", "backend": "local", "state": "succeeded", "sweep_id": "sw1"},
    )
    run_state.write_state(
        workdir / "runs" / "p5x2", {"run_id": "p5x2", "backend": "render", "state": "rendered"}
    )
    return workdir


def ask(cli, monkeypatch, line: str, shell: str = "bash") -> list[str]:
    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    result = cli("-sc", f"query={shell}")
    assert result.code == 0 and result.err == "", result.err
    return result.out.split()


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("trainstack ", sorted(COMMANDS)),
        ("trainstack st", sorted(COMMANDS)),  # the shell keeps those starting with "st"
        ("trainstack status ", ["mine1", "p5x2"]),
        ("trainstack logs ", ["mine1", "p5x2"]),
        ("trainstack cancel mi", ["mine1", "p5x2"]),
        ("trainstack status mine1 ", ["--backend", "--help", "-h"]),
        ("trainstack logs mine1 --", ["--backend", "--follow", "--help", "--rank", "-f", "-h"]),
        ("trainstack runs --state ", list(STATES)),
        ("trainstack runs --sweep ", ["sw1"]),
        ("trainstack data ", ["prepare"]),
        ("trainstack status storage.root=elsewhere ", ["--backend", "--help", "-h"]),  # no runs
        ("trainstack nosuch ", []),
    ],
)
def test_completion_outside_launch(cli, monkeypatch, two_runs, line, offered):
    assert ask(cli, monkeypatch, line) == offered


def test_fish_gets_one_candidate_a_line(cli, monkeypatch, two_runs):
    monkeypatch.setenv("COMP_LINE", "trainstack status ")
    result = cli("-sc", "query=fish")
    assert result.out == "mine1\np5x2\n"


def test_launch_lines_are_still_hydras(cli, monkeypatch, two_runs):
    assert "model=tiny" in ask(cli, monkeypatch, "trainstack launch model=t")


def test_bash_completes_through_the_installed_script(two_runs):
    """What bash does on <TAB>: the function Hydra's install script defines, fed the shell's
    COMP_* variables; COMPREPLY is what the terminal offers."""
    bash = shutil.which("bash")
    assert bash is not None
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}

    def complete(*words: str) -> tuple[list[str], str]:
        line = " ".join(words)
        quoted = " ".join(shlex.quote(w) for w in words)
        script = (
            'eval "$(trainstack launch --shell-completion install=bash)"\n'
            f"COMP_LINE={shlex.quote(line)}; COMP_POINT=${{#COMP_LINE}}\n"
            f"COMP_WORDS=({quoted}); "
            "COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n"
            'hydra_bash_completion; printf "%s\\n" "${COMPREPLY[@]}"\n'
        )
        done = subprocess.run(
            [bash, "-c", script], cwd=two_runs, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return sorted(w for w in done.stdout.split() if w), done.stderr

    assert complete("trainstack", "st") == (["status"], "")
    assert complete("trainstack", "status", "") == (["mine1", "p5x2"], "")
    assert complete("trainstack", "logs", "mine1", "--r") == (["--rank"], "")


def test_completing_a_heavy_command_loads_only_its_arguments(tmp_path):
    """<TAB> after `trainstack data|export|checkpoints|serve` builds the parser from
    jobs/commands/arguments.py: the command module (and the fastapi, torch or Hydra it imports
    at its top) stays unloaded."""
    probe = (
        "import sys\n"
        "from jobs.commands.arguments import ADD_ARGUMENTS\n"
        "from jobs.completion import candidates\n"
        "for name in ADD_ARGUMENTS:\n"
        "    assert candidates(f'trainstack {name} --'), name\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'fastapi', 'hydra')\n"
        "         or m in {f'jobs.commands.{n}' for n in ADD_ARGUMENTS}]\n"
        "print(sorted(ADD_ARGUMENTS), heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['checkpoints', 'data', 'export', 'serve'] []"
