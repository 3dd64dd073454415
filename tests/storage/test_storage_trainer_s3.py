"""The real trainer (2 ranks under torchrun) with an s3:// run dir and s3:// data on moto,
reached through `FaultProxy`: transient faults are retried, a run killed before a commit
resumes from S3 with the uninterrupted run's losses, and a final checkpoint whose upload
fails for good fails the run in one line and never looks committed. One chained test: each
phase starts from the state the previous left in the bucket, which keeps it to three trainer
launches."""

from __future__ import annotations

from pathlib import Path

import pytest

from testing_support.s3_server import FaultProxy, MotoS3, fail_every_nth, fail_matching, s3_env
from tests.trainer.harness import SAMPLE, losses_by_step
from trainer.faults import PAUSE_BEFORE_COMMIT_ENV
from trainer.storage import open_run_storage

pytestmark = pytest.mark.slow

STEPS = ["trainer.max_steps=8", "trainer.checkpoint.interval=4"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A slice of the sample corpus: plenty for 8 small steps, cheap to upload."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    with SAMPLE.open("rb") as fh:
        path.write_bytes(b"".join(fh.readline() for _ in range(150)))
    return path


@pytest.fixture
def s3_data(corpus: Path, moto_s3: MotoS3, s3_bucket: str) -> str:
    moto_s3.client().put_object(Bucket=s3_bucket, Key="data/train.jsonl", Body=corpus.read_bytes())
    return f"s3://{s3_bucket}/data/train.jsonl"


def committed(run_dir: str) -> list[str]:
    storage = open_run_storage(run_dir)
    names = storage.list_dir("checkpoints")
    return [n for n in names if storage.exists(f"checkpoints/{n}/COMMITTED")]


def test_s3_run_dir_survives_a_kill_and_a_failed_upload(
    start_trainer,
    fault_proxy: FaultProxy,
    s3_bucket: str,
    s3_data: str,
) -> None:
    run_dir = f"s3://{s3_bucket}/prefix/run"
    env = s3_env(fault_proxy.url)
    overrides = [*STEPS, f"data.path={s3_data}"]

    # 1. Transient faults throughout. Every rank has uploaded step 8's shards and the marker is
    #    not written yet: SIGKILL everything.
    fault_proxy.set_rule(fail_every_nth(8, status=503))
    first = start_trainer(2, overrides, run_dir=run_dir, env={**env, PAUSE_BEFORE_COMMIT_ENV: "8"})
    first.wait_for(lambda: "paused before committing step 8" in first.output())
    first.kill_group()
    # boto3 numbers its attempts (the proxy sees its retries); the CRT client that writes the
    # shards does not, so its retries show only as the run carrying on.
    assert fault_proxy.faults > 0 and fault_proxy.retries > 0
    uninterrupted = losses_by_step(run_dir)
    assert sorted(uninterrupted) == list(range(1, 9))
    assert committed(run_dir) == ["step-00000004"]
    assert open_run_storage(run_dir).list_dir("checkpoints/step-00000008")  # shards, no marker

    # 2. Resumed from step 4, it fails for good uploading step 8 after one file landed: the
    #    final save fails, so the run fails in one line, and what step 8 wrote is removed.
    fault_proxy.set_rule(fail_matching(r"/checkpoints/step-00000008/", status=500, after=1))
    failed = start_trainer(
        2, overrides, run_dir=run_dir, env={**env, "AWS_MAX_ATTEMPTS": "2"}
    ).finish()
    assert failed.returncode != 0
    assert f"resumed from {run_dir}/checkpoints/step-00000004 at step 4" in failed.stdout
    assert "error: the final checkpoint step 8 failed: rank " in failed.stderr
    fault_proxy.set_rule(None)
    assert losses_by_step(run_dir) == uninterrupted  # steps 5-8 again, from the checkpoint
    assert committed(run_dir) == ["step-00000004"]
    assert not open_run_storage(run_dir).list_dir("checkpoints/step-00000008")  # abandoned

    # 3. Clean S3: resumes from step 4 again and reproduces the uninterrupted run's losses
    #    bit for bit.
    resumed = start_trainer(2, overrides, run_dir=run_dir, env=env).finish()
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run_dir}/checkpoints/step-00000004 at step 4" in resumed.stdout
    assert losses_by_step(run_dir) == uninterrupted
    assert committed(run_dir) == ["step-00000004", "step-00000008"]
