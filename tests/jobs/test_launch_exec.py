"""`trainstack launch` as real processes: it execs the Hydra app with Hydra's arguments only,
trainstack's flags in the environment (jobs.commands.launch.main). The rest of the suite runs that
app in-process (the `exec_in_process` fixture); these run the exec itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
RENDER = ["backend=render", "compute=p5.48xlarge", "job.image=registry.example.com/t:v1"]


def trainstack(*args: str, cwd: Path, script: bool = True) -> subprocess.CompletedProcess:
    program = [str(BIN / "trainstack")] if script else [sys.executable, "-m", "jobs.cli"]
    env = dict(os.environ, TMPDIR=str(cwd))
    return subprocess.run(
        [*program, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_flags_anywhere_and_hydra_reads_only_its_own_arguments(tmp_path):
    done = trainstack("launch", "--cfg", "job", "trainer.lr=3e-4", "--dryrun", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "lr: 0.0003" in done.stdout and "dryrun" not in done.stdout


def test_the_app_is_named_after_the_program_that_started_it(tmp_path):
    """Hydra names the app (usage, completion script) from `sys.argv[0]`: the installed
    script's name, or `python <module file>` when started as a module."""
    refused = trainstack("launch", "--no-such-flag", cwd=tmp_path)
    assert refused.returncode == 2
    assert "trainstack: error: unrecognized arguments: --no-such-flag" in refused.stderr
    script = trainstack("launch", "--shell-completion", "install=bash", cwd=tmp_path)
    assert script.stdout.rstrip().endswith("hydra_bash_completion trainstack"), script.stdout


def test_a_dry_run_sweep_leaves_no_scratch_dir_and_no_marker_in_children(tmp_path):
    args = ["launch", "-m", "--dryrun", "trainer.lr=1e-4,2e-4", *RENDER]
    done = trainstack(*args, cwd=tmp_path, script=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("kind: TrainJob") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # TMPDIR and cwd: nothing left


def test_the_app_takes_its_flags_out_of_the_environment_its_children_inherit(cli):
    """The marker names the one process that is the Hydra app: a trainer it starts (or a
    `trainstack` a job runs) must not take itself for it."""
    from jobs.commands.launch import DRYRUN_SWEEP_DIR_ENV, LAUNCH_ENV

    result = cli("launch", "-m", "--dryrun", "trainer.lr=1e-4,2e-4", *RENDER)
    assert result.code == 0, result.err
    assert LAUNCH_ENV not in os.environ and DRYRUN_SWEEP_DIR_ENV not in os.environ
