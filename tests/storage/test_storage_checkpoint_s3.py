"""Checkpoint integrity on S3 (2 ranks under torchrun, moto behind `FaultProxy`): when only
rank 1's upload of one step fails for good, that step is abandoned on every rank (no marker, no
objects, no multipart uploads left), training goes on, the next checkpoint commits, and a resume
(falling back past a newest checkpoint that lost a shard) reproduces the uninterrupted run's
losses — for sync and async saves. The resume reads, per rank, only its share of the shards
(byte counts per rank from the proxy), and `trainstack checkpoints` lists the S3 run dir.
Failed saves in a row end the run in one line. A shard whose upload S3 acknowledged but never
stored (every rank reported success) is caught by the commit check: never committed."""

from __future__ import annotations

import pytest

from jobs.cli import main as trainstack
from testing_support.s3_server import ACK_NOT_STORED, FaultProxy, MotoS3, fail_matching, s3_env
from tests.trainer.harness import read_metrics
from trainer.checkpoint import list_checkpoints
from trainer.storage import open_run_storage

pytestmark = pytest.mark.slow

STEPS = ["trainer.max_steps=8", "trainer.checkpoint.interval=2", "trainer.checkpoint.keep=2"]
FAILING_STEP = 4


def committed(run_dir: str) -> list[int]:
    return [r.step for r in list_checkpoints(open_run_storage(run_dir)) if r.committed]


def training_losses(run_dir: str) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir) if "loss" in r}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_rank_failing_for_good_abandons_the_step_and_the_run_goes_on(
    start_trainer, fault_proxy: FaultProxy, moto_s3: MotoS3, s3_bucket: str, mode: str, capsys
) -> None:
    run_dir = f"s3://{s3_bucket}/run"
    env = {**s3_env(fault_proxy.url), "AWS_MAX_ATTEMPTS": "2"}
    overrides = [*STEPS, f"trainer.checkpoint.async_save={str(mode == 'async').lower()}"]
    fault_proxy.set_rule(
        fail_matching(rf"/checkpoints/step-{FAILING_STEP:08d}/__1_", status=500, methods=("PUT",))
    )
    first = start_trainer(2, overrides, run_dir=run_dir, env=env).finish()
    assert first.returncode == 0, first.stderr
    assert fault_proxy.faults > 0
    fault_proxy.set_rule(None)

    # Abandoned on every rank: nothing of step 4 is left, not even an unfinished upload.
    client = moto_s3.client()
    prefix = f"run/checkpoints/step-{FAILING_STEP:08d}/"
    assert client.list_objects_v2(Bucket=s3_bucket, Prefix=prefix).get("KeyCount") == 0
    assert not client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads")
    # One line naming the step, the failing rank and the cause; the same as a metrics event.
    lines = [line for line in first.stdout.splitlines() if "checkpoint_abandoned" in line]
    assert len(lines) == 1, first.stdout
    assert f"step={FAILING_STEP}" in lines[0] and "rank=1" in lines[0]
    assert "INTERNAL_ERROR" in lines[0], lines[0]  # the CRT client's word for HTTP 500
    events = [r for r in read_metrics(run_dir) if r.get("event") == "checkpoint_abandoned"]
    assert [(e["step"], e["rank"]) for e in events] == [(FAILING_STEP, 1)]
    # Training went on; the later checkpoints committed and are whole.
    uninterrupted = training_losses(run_dir)
    assert sorted(uninterrupted) == list(range(1, 9))
    assert committed(run_dir) == [6, 8]
    assert all(r.complete for r in list_checkpoints(open_run_storage(run_dir)))
    assert trainstack(["checkpoints", run_dir]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(row[0], row[1], row[-1]) for row in listed] == [
        ("6", "yes", "complete"),
        ("8", "yes", "complete"),
    ]

    # Step 8 loses rank 1's shard: the resume falls back to step 6, repeats the uninterrupted
    # run's losses bit for bit, and each rank reads about half of the shard bytes.
    storage = open_run_storage(run_dir)
    storage.delete_tree("checkpoints/step-00000008/__1_0.distcp")
    shard_bytes = sum(
        size
        for name, size in storage.file_sizes("checkpoints/step-00000006").items()
        if name.endswith(".distcp")
    )
    before = len(fault_proxy.transfers)
    resumed = start_trainer(2, overrides, run_dir=run_dir, env=env).finish()
    assert resumed.returncode == 0, resumed.stderr
    assert f"skipping {run_dir}/checkpoints/step-00000008: missing __1_0.distcp" in resumed.stderr
    assert f"resumed from {run_dir}/checkpoints/step-00000006 at step 6" in resumed.stdout
    assert training_losses(run_dir) == uninterrupted
    read = {}
    for t in fault_proxy.transfers[before:]:
        if t.method == "GET" and "/step-00000006/__" in t.path:
            read[t.rank] = read.get(t.rank, 0) + t.received
    assert set(read) == {0, 1}, read
    detail = [
        (t.rank, t.path.split("/")[-1], t.received)
        for t in fault_proxy.transfers[before:]
        if t.method == "GET" and "/step-00000006/__" in t.path
    ]
    for rank, nbytes in read.items():
        assert nbytes <= 1.2 * shard_bytes / 2, (rank, nbytes, shard_bytes, detail)


def test_failed_saves_in_a_row_end_the_run_in_one_line(
    run_trainer, fault_proxy: FaultProxy, s3_bucket: str
) -> None:
    run_dir = f"s3://{s3_bucket}/run"
    env = {**s3_env(fault_proxy.url), "AWS_MAX_ATTEMPTS": "2"}
    fault_proxy.set_rule(fail_matching(r"/checkpoints/step-\d+/__1_", status=500, methods=("PUT",)))
    failed = run_trainer(2, STEPS, run_dir=run_dir, env=env, launcher="trainer.launch")
    assert failed.returncode == 1, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, failed.stderr
    assert errors[0].startswith("error: 2 checkpoint saves failed in a row ")
    assert "(trainer.checkpoint.max_consecutive_failures=2); last: checkpoint step 4" in errors[0]
    events = [r for r in read_metrics(run_dir) if r.get("event") == "checkpoint_abandoned"]
    assert [(e["step"], e["rank"]) for e in events] == [(2, 1), (4, 1)]
    assert committed(run_dir) == []


def test_a_shard_acknowledged_but_never_stored_is_never_committed(
    run_trainer, fault_proxy: FaultProxy, moto_s3: MotoS3, s3_bucket: str
) -> None:
    run_dir = f"s3://{s3_bucket}/run"
    # The request that makes rank 1's shard of step 4 exist (the multipart upload's completion,
    # or a plain PUT) is answered as stored, and dropped.
    shard = rf"/checkpoints/step-{FAILING_STEP:08d}/__1_\d+\.distcp(\?uploadId=[^&]*)?$"
    fault_proxy.set_rule(fail_matching(shard, ACK_NOT_STORED, methods=("PUT", "POST")))
    result = run_trainer(2, STEPS, run_dir=run_dir, env=s3_env(fault_proxy.url))
    assert result.returncode == 0, result.stderr
    assert fault_proxy.faults == 1, [r for r in fault_proxy.seen if "__1_" in r.path]
    fault_proxy.set_rule(None)

    events = [r for r in read_metrics(run_dir) if r.get("event") == "checkpoint_abandoned"]
    assert [(e["step"], e["rank"]) for e in events] == [(FAILING_STEP, 0)], events
    assert events[0]["cause"] == (
        "files incomplete after every rank reported success: missing __1_0.distcp"
    )
    # Never committed, and nothing of it left (its parts, uploaded but never completed, too).
    client = moto_s3.client()
    prefix = f"run/checkpoints/step-{FAILING_STEP:08d}/"
    assert client.list_objects_v2(Bucket=s3_bucket, Prefix=prefix).get("KeyCount") == 0
    assert not client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads")
    # Training went on; the later checkpoints committed whole.
    assert sorted(training_losses(run_dir)) == list(range(1, 9))
    assert committed(run_dir) == [6, 8]
    assert all(r.complete for r in list_checkpoints(open_run_storage(run_dir)))
