"""Runs that several trainer test modules only read, made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.harness import TrainerResult, committed_steps, launch_trainer, losses_by_step

CHECKPOINT_EVERY_2 = ["trainer.checkpoint.interval=2"]
ASYNC_CHECKPOINTS = ["trainer.checkpoint.async_save=true"]


@pytest.fixture(scope="session")
def every_2_reference(tmp_path_factory: pytest.TempPathFactory) -> TrainerResult:
    """The uninterrupted 2-rank run of the small model, 8 steps, async checkpoints at 2, 4, 6
    and a final one at 8 (latest 3 kept). Checkpointing never changes the training, so sync
    runs match it too. Tests copy what they change out of it (test_trainer_resume.py,
    test_trainer_checkpoint_fallback.py)."""
    work = tmp_path_factory.mktemp("every-2-reference")
    result = launch_trainer(work, 2, [*CHECKPOINT_EVERY_2, *ASYNC_CHECKPOINTS]).finish()
    assert result.returncode == 0, result.stderr
    assert sorted(losses_by_step(result.run_dir)) == list(range(1, 9))
    assert committed_steps(Path(result.run_dir)) == [4, 6, 8]
    return result
