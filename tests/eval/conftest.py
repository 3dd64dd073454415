"""A tiny trained run (launched as a user would), the two local lm-eval tasks, and the CLI
as real processes with every cache lm-eval and datasets write in the test's tmp dir."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testing_support.eval_tasks import write_tasks

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "model.dim=64",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "model.ffn_hidden_dim=128",
    "data.seq_len=64",
    "trainer.eval_interval=0",
    "trainer.max_steps=4",
    f"data.path={REPO / 'data/sample/train.jsonl'}",
]
TASKS = ["eval.tasks=[ts_mc,ts_gen]", "eval.include_defaults=false"]


@dataclass(frozen=True)
class Workspace:
    cwd: Path
    tasks: Path
    env: dict[str, str]

    def trainstack(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "jobs.cli", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def tasks_args(self) -> list[str]:
        return [*TASKS, f"eval.include_path={self.tasks}"]


def cache_env(root: Path) -> dict[str, str]:
    return dict(
        os.environ,
        HOME=str(root / "home"),
        XDG_CACHE_HOME=str(root / "cache"),
        HF_HOME=str(root / "hf"),
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        TMPDIR=str(root),
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """`trainstack launch run_id=tiny` (4 steps of a 70k-parameter model) in a fresh dir."""
    root = tmp_path_factory.mktemp("eval")
    (root / "home").mkdir()
    space = Workspace(root, write_tasks(root / "tasks"), cache_env(root))
    done = space.trainstack("launch", "run_id=tiny", *TINY)
    assert done.returncode == 0, done.stderr
    return space


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen


@pytest.fixture(scope="module")
def served(workspace: Workspace) -> Iterator[Served]:
    """`trainstack serve-model tiny --port 0`, stopped by its pid at the end."""
    process = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "serve-model", "tiny", "--port", "0"],
        cwd=workspace.cwd,
        env=workspace.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the model is loaded
        match = re.search(r"on (http://\S+)", line)
        assert match, line
        yield Served(match.group(1), process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
