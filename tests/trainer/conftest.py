"""Fixtures of the trainer tests (helpers live in `tests.trainer.harness`).

`run_trainer(nproc, overrides)` runs to completion; `start_trainer(...)` returns a live
`TrainerProcess` for tests that kill or signal it. Both take `run_dir=` (an s3:// URI works,
with the AWS_* variables in `env=`), `env=`, `small=` (False: the default job's model) and
`launcher=` ("torchrun", or "trainer.launch" for the exit-code-keeping wrapper).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.harness import TrainerProcess, TrainerResult, launch_trainer


@pytest.fixture
def start_trainer(tmp_path: Path):
    """start_trainer(nproc, overrides, run_dir=None, env=None, small=True) -> TrainerProcess;
    anything still running at the end of the test is killed."""
    started: list[TrainerProcess] = []

    def start(nproc: int, overrides: list[str], **kwargs) -> TrainerProcess:
        started.append(launch_trainer(tmp_path, nproc, overrides, **kwargs))
        return started[-1]

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.kill_group()


@pytest.fixture
def run_trainer(start_trainer):
    """run_trainer(nproc, overrides, run_dir=None, env=None, small=True) -> TrainerResult.
    nproc=0 runs `python -m trainer` without torchrun."""

    def run(nproc: int, overrides: list[str], **kwargs) -> TrainerResult:
        return start_trainer(nproc, overrides, **kwargs).finish()

    return run
