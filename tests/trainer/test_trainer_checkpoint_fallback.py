"""Resume falls back: a committed checkpoint that cannot load (a shard deleted, truncated or
garbled) is skipped with one warning naming it and why, the next older one is loaded on every
rank, and the run repeats the uninterrupted one's losses bit for bit. When no committed
checkpoint loads the run fails in one line instead of starting over; pruning never deletes
the newest loadable checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.trainer.harness import (
    TrainerResult,
    committed_steps,
    losses_by_step,
    read_metrics,
)
from trainer.checkpoint import list_checkpoints
from trainer.storage import open_run_storage

pytestmark = pytest.mark.slow

CHECKPOINT_EVERY_2 = ["trainer.checkpoint.interval=2"]


def copy_of(reference: TrainerResult, tmp_path: Path) -> Path:
    """A copy of the uninterrupted run (`every_2_reference`, conftest.py), to damage."""
    run_dir = tmp_path / "run"
    shutil.copytree(reference.run_dir, run_dir)
    return run_dir


def shard(run_dir: Path, step: int, rank: int) -> Path:
    return run_dir / f"checkpoints/step-{step:08d}/__{rank}_0.distcp"


def delete(path: Path) -> None:
    path.unlink()


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def garble(path: Path) -> None:
    """Same size, other bytes: only loading it can tell."""
    path.write_bytes(bytes(b ^ 0x5A for b in path.read_bytes()))


@pytest.mark.parametrize(
    ("damage", "why"),
    [(delete, "missing __1_0.distcp"), (truncate, "short __1_0.distcp"), (garble, "does not load")],
)
def test_a_broken_newest_checkpoint_falls_back_to_the_previous(
    run_trainer, tmp_path: Path, every_2_reference: TrainerResult, damage, why: str
) -> None:
    run_dir = copy_of(every_2_reference, tmp_path)
    damage(shard(run_dir, 8, rank=1))
    resumed = run_trainer(2, CHECKPOINT_EVERY_2)
    assert resumed.returncode == 0, resumed.stderr
    warnings = [line for line in resumed.stderr.splitlines() if "skipping" in line]
    assert len(warnings) == 1, resumed.stderr
    assert f"{run_dir}/checkpoints/step-00000008: {why}" in warnings[0]
    assert "step-00000006 at step 6" in resumed.stdout
    assert losses_by_step(str(run_dir)) == losses_by_step(every_2_reference.run_dir)
    assert committed_steps(run_dir) == [4, 6, 8]  # step 8 written again, whole
    assert all(r.complete for r in list_checkpoints(open_run_storage(str(run_dir))))


def test_no_committed_checkpoint_loads_fails_in_one_line(
    run_trainer, tmp_path: Path, every_2_reference: TrainerResult
) -> None:
    run_dir = copy_of(every_2_reference, tmp_path)
    for step in (4, 6, 8):
        delete(shard(run_dir, step, rank=1))
    lines_before = len(read_metrics(str(run_dir)))
    failed = run_trainer(2, CHECKPOINT_EVERY_2, launcher="trainer.launch")
    assert failed.returncode == 1, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, failed.stderr
    assert "none of the 3 committed checkpoints" in errors[0]
    assert "does not start over from step 0" in errors[0]
    assert len(read_metrics(str(run_dir))) == lines_before  # not one step trained


def test_pruning_keeps_the_newest_loadable_checkpoint(
    run_trainer, tmp_path: Path, every_2_reference: TrainerResult
) -> None:
    # Step 8 committed but broken: the run resumes from 6 and commits 7 (its final save).
    # With keep=1, 7 is the newest loadable checkpoint: it must survive the broken 8.
    run_dir = copy_of(every_2_reference, tmp_path)
    delete(shard(run_dir, 8, rank=1))
    result = run_trainer(2, ["trainer.checkpoint.keep=1", "trainer.max_steps=7"])
    assert result.returncode == 0, result.stderr
    assert committed_steps(run_dir) == [7, 8]
    reports = {r.step: r for r in list_checkpoints(open_run_storage(str(run_dir)))}
    assert reports[7].complete and not reports[8].complete
