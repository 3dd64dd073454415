"""Issue 47, scenario 5: storage faults during checkpoint commits, run-dir writes and the
workdir upload (the real trainer, one rank under torchrun, an s3:// run dir on moto behind
`FaultProxy`; the workdir through `trainstack launch` to the fake cluster).

The invariants: the newest committed checkpoint is always complete; a resume never reads a
checkpoint that is not committed; the run's record (metrics.jsonl, its log lines) never claims
a checkpoint that is not there; a submission whose code could not be stored leaves nothing on
the cluster. Each test prints the figures of the issue's table (`-s` shows them): what was
injected, how many times, and how long the run took to commit again once S3 was back.
"""

from __future__ import annotations

import re

import pytest

from testing_support.k8s.cluster import NAMESPACE
from testing_support.s3_server import (
    FaultProxy,
    MotoS3,
    Slow,
    fail_matching,
    first_of,
    outage,
    s3_env,
)
from tests.k8s import conftest as cluster_fixtures
from tests.trainer.harness import read_metrics
from trainer.checkpoint import list_checkpoints
from trainer.storage import open_run_storage

apiserver = cluster_fixtures.apiserver
kubeconfig = cluster_fixtures.kubeconfig
fast_retry = cluster_fixtures.fast_retry
fast_restarts = cluster_fixtures.fast_restarts
trainstack = cluster_fixtures.trainstack

STEPS = [
    "trainer.max_steps=8",
    "trainer.checkpoint.interval=2",
    "trainer.checkpoint.keep=10",  # nothing pruned: every checkpoint the record names stays
    "trainer.log_interval=1",
]
OUTAGE_FAULTS = 6
"""Requests (to keys other than the failing step's) that fail while S3 is down: the abandoned
checkpoint's metrics event and its clean-up fall inside it, and step 5's record."""
SAVED = re.compile(r"checkpoint step (\d+) saved in")


def committed_and_complete(run_dir: str) -> tuple[list[int], list[int]]:
    reports = list_checkpoints(open_run_storage(run_dir))
    committed = [r.step for r in reports if r.committed]
    return committed, [r.step for r in reports if r.committed and r.complete]


@pytest.mark.slow
def test_an_outage_during_a_commit_loses_nothing_and_a_resume_reads_only_committed_ones(
    start_trainer, fault_proxy: FaultProxy, moto_s3: MotoS3, s3_bucket: str
) -> None:
    run_dir = f"s3://{s3_bucket}/run"
    env = {**s3_env(fault_proxy.url), "AWS_MAX_ATTEMPTS": "2"}

    # 1. S3 goes down as step 4 is written (every request to it fails from then on) and stays
    #    down for OUTAGE_FAULTS more requests: the metrics event of the abandoned step, its
    #    clean-up and the next step's record fail too. The other markers answer late.
    down = outage(r"/checkpoints/step-00000004/", OUTAGE_FAULTS, status=503)
    late_markers = fail_matching(r"/COMMITTED$", Slow(0.5), methods=("PUT",))
    fault_proxy.set_rule(first_of(down, late_markers))
    first = start_trainer(1, STEPS, run_dir=run_dir, env=env).finish()
    assert first.returncode == 0, first.stderr[-3000:]
    fault_proxy.set_rule(None)
    seen = fault_proxy.seen

    committed, complete = committed_and_complete(run_dir)
    assert committed == complete == [2, 6, 8]
    storage = open_run_storage(run_dir)
    assert "COMMITTED" not in storage.list_dir("checkpoints/step-00000004")
    records = read_metrics(run_dir)
    # Nothing of the record was lost to the outage: every step, written late where it failed.
    assert sorted(r["step"] for r in records if "loss" in r) == list(range(1, 9))
    abandoned = [r["step"] for r in records if r.get("event") == "checkpoint_abandoned"]
    assert abandoned == [4]
    # The record claims exactly the checkpoints that are there, committed and whole.
    assert sorted(int(s) for s in SAVED.findall(first.stdout)) == committed
    assert "metrics records are kept" in first.stderr
    ended = down.ended_at()  # type: ignore[attr-defined]
    assert ended is not None
    recommit = min(
        r.at
        for r in seen
        if r.method == "PUT" and r.path.endswith("/step-00000006/COMMITTED") and r.at > ended
    )
    injected = sum(1 for r in seen if r.fault == 503)
    slowed = sum(1 for r in seen if isinstance(r.fault, Slow))
    print(
        f"\n[scenario 5] commit outage: {injected} requests failed (503), {slowed} markers "
        f"answered 0.5 s late; lost 0 records, 0 committed checkpoints; "
        f"recommitted {recommit - ended:.2f} s after S3 was back"
    )

    # 2. A half-written newer step (metadata and one shard, no marker: a kill mid-commit) is
    #    planted; the resume, under slow and failing reads, loads step 8 and never reads it.
    client = moto_s3.client()
    for name in (".metadata", "__0_0.distcp"):
        client.copy_object(
            Bucket=s3_bucket,
            Key=f"run/checkpoints/step-00000010/{name}",
            CopySource={"Bucket": s3_bucket, "Key": f"run/checkpoints/step-00000008/{name}"},
        )
    before = len(fault_proxy.seen)
    slow_reads = fail_matching(r"/checkpoints/", Slow(0.3, hold=True), ("GET", "HEAD"), times=10)
    torn_read = fail_matching(r"/step-00000008/\.metadata$", 503, ("GET",), times=1)
    fault_proxy.set_rule(first_of(torn_read, slow_reads))
    again = start_trainer(1, STEPS, run_dir=run_dir, env=env).finish()
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {run_dir}/checkpoints/step-00000008 at step 8" in again.stdout
    reads = [r for r in fault_proxy.seen[before:] if r.method in ("GET", "HEAD")]
    assert any("/step-00000008/" in r.path for r in reads)
    assert not [r.path for r in reads if "/step-00000010/" in r.path]
    assert committed_and_complete(run_dir)[0] == [2, 6, 8]  # the planted step stays uncommitted
    resumed = fault_proxy.seen[before:]
    assert sum(1 for r in resumed if r.fault == 503) == 1  # retried: the resume went on
    print(
        f"[scenario 5] resume: {sum(1 for r in resumed if isinstance(r.fault, Slow))} reads "
        f"0.3 s late, {sum(1 for r in resumed if r.fault == 503)} failed; read 0 objects of "
        "the uncommitted step"
    )


WORKDIR_RUN = ["runner=command", "runner.command=[python,-u,main.py]", "runner.torchrun=false"]


def test_the_workdir_upload_under_an_outage_leaves_nothing_and_a_slow_one_submits(
    trainstack, apiserver, fault_proxy: FaultProxy, moto_s3: MotoS3, s3_bucket: str, tmp_path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hello')\n")
    root = f"s3://{s3_bucket}/runs"

    def launch(run_id: str) -> int:
        args = [*WORKDIR_RUN, f"runner.workdir={project}", f"storage.root={root}"]
        return trainstack("launch", *args, f"run_id={run_id}", launch=True)

    fault_proxy.set_rule(fail_matching(r"/code/", status=503, methods=("PUT", "POST")))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_MAX_ATTEMPTS", "2")
        assert launch("down") != 0
    refused = fault_proxy.faults
    assert refused == 2  # both attempts, then one clear refusal
    assert apiserver.get("pytorchjobs", "down", NAMESPACE) is None
    assert not [m for m in apiserver.list("configmaps", NAMESPACE) if "down" in str(m)]
    keys = moto_s3.client().list_objects_v2(Bucket=s3_bucket, Prefix="runs/down/")
    assert keys.get("KeyCount", 0) == 0

    fault_proxy.set_rule(fail_matching(r"/code/", Slow(1.0, hold=True), methods=("PUT",)))
    assert launch("slow") == 0
    assert apiserver.get("pytorchjobs", "slow", NAMESPACE) is not None
    stored = moto_s3.client().list_objects_v2(Bucket=s3_bucket, Prefix="runs/slow/code/")
    assert stored["KeyCount"] == 1
    print(
        f"\n[scenario 5] workdir upload: {refused} PUTs failed (refused, nothing left), "
        f"{fault_proxy.slowed} held 1 s (submitted once)"
    )
