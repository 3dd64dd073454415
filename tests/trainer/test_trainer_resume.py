"""Exact resume: interrupted 2-rank runs reproduce the uninterrupted run's loss at every later
step, bit for bit; a checkpoint cut short is never loaded; 2 ranks hand over to 1."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from contract.config import EXIT_PREEMPTED
from tests.trainer.harness import (
    TrainerResult,
    committed_steps,
    losses_by_step,
    read_metrics,
)
from trainer.faults import PAUSE_BEFORE_COMMIT_ENV, STEP_DELAY_ENV

pytestmark = pytest.mark.slow

CHECKPOINT_EVERY_2 = ["trainer.checkpoint.interval=2"]
ASYNC = ["trainer.checkpoint.async_save=true"]


def test_sigkill_while_writing_a_checkpoint_resumes_exactly_from_the_previous(
    start_trainer, tmp_path: Path, every_2_reference: TrainerResult
):
    run_dir = tmp_path / "run"
    # Step 2's checkpoint commits; step 4's shards are written, then the whole job is killed
    # before its marker.
    first = start_trainer(2, CHECKPOINT_EVERY_2, env={PAUSE_BEFORE_COMMIT_ENV: "4"})
    first.wait_for(lambda: "paused before committing step 4" in first.output())
    first.kill_group()
    torn = run_dir / "checkpoints/step-00000004"
    assert (torn / ".metadata").is_file() and list(torn.glob("__1_*.distcp"))
    assert not (torn / "COMMITTED").exists()
    assert committed_steps(run_dir) == [2]

    resumed = start_trainer(2, CHECKPOINT_EVERY_2).finish()
    assert resumed.returncode == 0, resumed.stderr
    assert "skipping" in resumed.stderr and "step-00000004: not committed" in resumed.stderr
    assert "step-00000002 at step 2" in resumed.stdout
    # Steps 3-4 were logged by the killed run and again by the resumed one.
    assert [r["step"] for r in read_metrics(str(run_dir))] == [1, 2, 3, 4, *range(3, 9)]
    assert losses_by_step(str(run_dir)) == losses_by_step(every_2_reference.run_dir)
    assert committed_steps(run_dir) == [4, 6, 8]


def test_sigterm_mid_run_checkpoints_exits_143_and_resumes_exactly(
    start_trainer, tmp_path: Path, every_2_reference: TrainerResult
):
    run_dir = tmp_path / "run"
    # Slow steps, async checkpoints every 2 steps: SIGTERM waits for one in flight, then saves
    # the step it stopped at.
    # Launched through trainer.launch, as torchrun alone would exit 1 instead of 143.
    first = start_trainer(
        2, [*CHECKPOINT_EVERY_2, *ASYNC], env={STEP_DELAY_ENV: "0.5"}, launcher="trainer.launch"
    )
    first.wait_for(lambda: (run_dir / "logs/metrics.jsonl").is_file())
    first.wait_for(lambda: len(read_metrics(str(run_dir))) >= 2)
    first.signal(signal.SIGTERM)
    stopped = first.finish(timeout=120)
    assert stopped.returncode == EXIT_PREEMPTED, stopped.stderr
    assert f"exit {EXIT_PREEMPTED}" in stopped.stdout, stopped.stdout + stopped.stderr
    stop_step = committed_steps(run_dir)[-1]
    assert 2 <= stop_step < 8
    assert [r["step"] for r in read_metrics(str(run_dir))] == list(range(1, stop_step + 1))

    resumed = start_trainer(2, []).finish()
    assert resumed.returncode == 0, resumed.stderr
    assert f"at step {stop_step}" in resumed.stdout
    assert losses_by_step(str(run_dir)) == losses_by_step(every_2_reference.run_dir)


def test_two_rank_async_checkpoint_resumes_on_one_rank(run_trainer, tmp_path, every_2_reference):
    run_dir = tmp_path / "run"
    source = Path(every_2_reference.run_dir) / "checkpoints/step-00000004"
    shutil.copytree(source, run_dir / "checkpoints/step-00000004")
    # One process, same global batch: micro 2 x accumulation 2 instead of micro 2 x 2 ranks.
    result = run_trainer(0, [*CHECKPOINT_EVERY_2, "trainer.global_batch_size=4"])
    assert result.returncode == 0, result.stderr
    assert "at step 4" in result.stdout
    resumed, expected = losses_by_step(str(run_dir)), losses_by_step(every_2_reference.run_dir)
    assert sorted(resumed) == [5, 6, 7, 8]
    # Same data and weights; only the order of float additions differs from 2 ranks.
    for step in resumed:
        assert resumed[step] == pytest.approx(expected[step], rel=1e-4)
