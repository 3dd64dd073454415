"""Bad input to `trainstack eval` and `trainstack serve-model`: one line naming the key and
what is allowed, exit 2, nothing written under the run's eval/ and no model loaded."""

from __future__ import annotations

import re
import shutil
import socket

import pytest

from jobs.cli import main

pytestmark = pytest.mark.slow  # the module's run is trained once: ~30 s


@pytest.fixture(scope="module")
def runs(workspace):
    """`tiny` (checkpoint at step 4) and `empty` (a run dir with its config, no checkpoint)."""
    empty = workspace.cwd / "runs/empty"
    empty.mkdir()
    shutil.copy(workspace.cwd / "runs/tiny/config.yaml", empty / "config.yaml")
    return workspace


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


EVAL_CASES = {
    "no tasks": (["tiny"], r"eval\.tasks: name at least one task"),
    "unknown key": (
        ["tiny", "eval.taskz=[ts_mc]"],
        r"eval\.taskz: no such key; allowed: eval\.tasks",
    ),
    "not key=value": (["tiny", "eval.tasks"], r"eval\.tasks: not key=value"),
    "unknown task": (
        ["tiny", "eval.tasks=[nope]", "TASKS"],
        r"eval\.tasks: no task named 'nope'.*ts_gen, ts_mc",
    ),
    "include_path missing": (
        ["tiny", "eval.tasks=[ts_mc]", "eval.include_path=/no/such"],
        r"eval\.include_path: '/no/such' is not a dir",
    ),
    "no task left": (
        ["tiny", "eval.tasks=[ts_mc]", "eval.include_defaults=false"],
        r"eval\.include_defaults: false needs eval\.include_path",
    ),
    "limit zero": (
        ["tiny", "eval.tasks=[ts_mc]", "eval.limit=0"],
        r"eval\.limit: 0\.0 is not allowed; allowed: a count",
    ),
    "limit 1.5": (
        ["tiny", "eval.tasks=[ts_mc]", "eval.limit=1.5"],
        r"eval\.limit: 1\.5 is not allowed",
    ),
    "limit text": (["tiny", "eval.tasks=[ts_mc]", "eval.limit=abc"], r"eval\.limit: .*abc"),
    "batch size": (
        ["tiny", "eval.tasks=[ts_mc]", "eval.batch_size=0"],
        r"eval\.batch_size: 0 is out of range; allowed: >= 1",
    ),
    "no such run": (["nosuch", "eval.tasks=[ts_mc]"], r"no run 'nosuch': nothing at runs/nosuch"),
    "no checkpoint": (
        ["empty", "eval.tasks=[ts_mc]", "TASKS"],
        r"--step: runs/empty has no committed checkpoint",
    ),
    "step not committed": (
        ["tiny", "--step", "3", "eval.tasks=[ts_mc]", "TASKS"],
        r"--step: no committed checkpoint at step 3; committed: 4",
    ),
    "endpoint scheme": (
        ["tiny", "--endpoint", "ftp://x", "eval.tasks=[ts_mc]"],
        r"--endpoint: 'ftp://x'; allowed: an http\(s\):// URL",
    ),
    "endpoint down": (
        ["tiny", "--endpoint", "http://127.0.0.1:PORT", "eval.tasks=[ts_mc]", "TASKS"],
        r"--endpoint: http://127.*/v1/models did not list a model",
    ),
}


@pytest.mark.parametrize("case", EVAL_CASES)
def test_bad_eval_input_is_one_line_and_exit_2(case, runs, monkeypatch, capsys):
    args, pattern = EVAL_CASES[case]
    tasks = [f"eval.include_path={runs.tasks}", "eval.include_defaults=false"]
    args = [a for arg in args for a in (tasks if arg == "TASKS" else [arg])]
    args = [a.replace("PORT", str(free_port())) for a in args]
    monkeypatch.chdir(runs.cwd)
    for key in ("HF_HOME", "HF_DATASETS_OFFLINE", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, runs.env[key])
    assert main(["eval", *args]) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("trainstack")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("trainstack eval: ")
    assert re.search(pattern, lines[0]), lines[0]
    assert not (runs.cwd / "runs/tiny/eval").exists()
    assert not (runs.cwd / "runs/empty/eval").exists()


SERVE_CASES = {
    "dtype": (["tiny", "--dtype", "fp16"], r"--dtype: 'fp16'; allowed: fp32, bf16"),
    "port": (["tiny", "--port", "70000"], r"--port: 70000; allowed: 0 to 65535"),
    "no such run": (["nosuch"], r"no run 'nosuch'"),
    "no checkpoint": (["empty", "--port", "0"], r"--step: runs/empty has no committed checkpoint"),
}


@pytest.mark.parametrize("case", SERVE_CASES)
def test_bad_serve_model_input_is_one_line_and_exit_2(case, runs, monkeypatch, capsys):
    args, pattern = SERVE_CASES[case]
    monkeypatch.chdir(runs.cwd)
    assert main(["serve-model", *args]) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("trainstack")]
    assert len(lines) == 1 and re.search(pattern, lines[0]), lines
