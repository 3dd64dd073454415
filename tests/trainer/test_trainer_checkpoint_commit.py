"""A step whose files are incomplete after every rank reported its write a success is never
committed: the commit check finds the shard missing or short (against the step's own
`.metadata`), the step is abandoned with one event from rank 0, and training goes on
(2 ranks under torchrun, local run dir; the shards are damaged between the save and the
check by tests/trainer/commit_check_worker.py; on S3: tests/storage)."""

from __future__ import annotations

from pathlib import Path

from contract.checkpoints import step_dir
from tests.trainer.commit_check_worker import DAMAGE_ENV
from tests.trainer.harness import committed_steps, losses_by_step, read_metrics

WORKER = "tests.trainer.commit_check_worker"


def test_a_shard_lost_or_cut_after_every_rank_wrote_it_is_never_committed(run_trainer):
    overrides = ["trainer.checkpoint.interval=2", "trainer.checkpoint.keep=4"]
    env = {DAMAGE_ENV: "2:delete,6:truncate"}
    result = run_trainer(2, overrides, env=env, module=WORKER)
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.run_dir)

    events = [r for r in read_metrics(str(run_dir)) if r.get("event") == "checkpoint_abandoned"]
    assert [(e["step"], e["rank"]) for e in events] == [(2, 0), (6, 0)], events
    incomplete = "files incomplete after every rank reported success: "
    assert events[0]["cause"] == f"{incomplete}missing __1_0.distcp", events[0]
    assert events[1]["cause"].startswith(f"{incomplete}short __1_0.distcp ("), events[1]
    lines = [line for line in result.stdout.splitlines() if "checkpoint_abandoned" in line]
    assert len(lines) == 2, result.stdout
    # No marker, and nothing of the abandoned steps left; the others committed.
    assert committed_steps(run_dir) == [4, 8]
    assert not (run_dir / step_dir(2)).exists() and not (run_dir / step_dir(6)).exists()
    # Training went on through both.
    assert sorted(losses_by_step(str(run_dir))) == list(range(1, 9))
