"""`trainstack logs` once the pods are gone: the rank's log comes from the CloudWatch Logs group
Fluent Bit ships to (moto's server on 127.0.0.1), said so in one line; with neither pods nor an
archived copy, one line and exit 2."""

from __future__ import annotations

import time
import uuid

import pytest

from testing_support.k8s.cluster import NAMESPACE
from testing_support.k8s.fake_operator import JobPlan
from testing_support.k8s.fake_trainer import JOBSET_LABEL, TrainPlan
from tests.k8s.conftest import moto_client


@pytest.fixture
def log_group(moto_s3, monkeypatch):
    """A fresh log group on the moto server; boto3's `logs` client in this process uses it."""
    client = moto_client(moto_s3, monkeypatch, "logs", "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS")
    group = f"/aws/eks/test-{uuid.uuid4().hex[:8]}/containers"
    client.create_log_group(logGroupName=group)
    yield client, group
    client.delete_log_group(logGroupName=group)


def archive(client, group: str, stream: str, lines: list[str]) -> None:
    client.create_log_stream(logGroupName=group, logStreamName=stream)
    now_ms = int(time.time() * 1000)  # CloudWatch rejects events more than 14 days old
    events = [{"timestamp": now_ms + i, "message": line} for i, line in enumerate(lines)]
    client.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def test_expired_run_reads_each_ranks_archived_log(trainstack, log_group, capsys):
    client, group = log_group
    archive(client, group, "gone1-master-0.pytorch", ["rank0 step 1", "rank0 step 2"])
    archive(client, group, "gone1-worker-0.pytorch", ["rank1 step 1"])
    # Other pods' streams, one whose name extends this pod's, must not leak in.
    archive(client, group, "gone1-master-0.pytorch-x", ["not this pod"])
    archive(client, group, "gone1-master-0.sidecar", ["not this container"])
    where = ["backend=kubernetes", f"cluster.log_group={group}"]

    assert trainstack("logs", "gone1", *where) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["rank0 step 1", "rank0 step 2"]
    assert captured.err.splitlines() == [
        f"gone1: pod gone1-master-0 is gone; reading its archived log from {group}"
    ]
    assert trainstack("logs", "gone1", "--rank", "1", *where) == 0
    assert capsys.readouterr().out.splitlines() == ["rank1 step 1"]


def test_finished_run_whose_pods_were_deleted_reads_the_archive(
    apiserver, trainstack, log_group, capsys
):
    client, group = log_group
    apiserver.operator.default = JobPlan(steps=2, step_seconds=0.01)
    assert trainstack("launch", "--wait", "run_id=arch1", "compute.nodes=1", launch=True) == 0
    apiserver.operator.wait_idle()
    assert apiserver.remove("pods", "arch1-master-0", NAMESPACE) is not None
    archive(client, group, "arch1-master-0.pytorch", ["archived line"])
    capsys.readouterr()

    assert trainstack("logs", "arch1", f"cluster.log_group={group}") == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["archived line"]
    assert "reading its archived log" in captured.err


def test_no_pods_and_no_archive_is_one_line_exit_2(trainstack, log_group, capsys):
    _, group = log_group
    assert trainstack("logs", "nowhere", "backend=kubernetes", f"cluster.log_group={group}") == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"trainstack logs: nowhere: rank 0 has no pod and no archived log (log group {group})"
    ]


def test_missing_log_group_is_no_archive(trainstack, log_group, capsys):
    assert trainstack("logs", "nowhere", "backend=kubernetes", "cluster.log_group=/no/such") == 2
    assert "no archived log (log group /no/such)" in capsys.readouterr().err


def test_unreadable_archive_is_one_line(trainstack, log_group, monkeypatch, capsys):
    _, group = log_group
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDWATCH_LOGS", "http://127.0.0.1:9")  # closed port
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert trainstack("logs", "gone2", "backend=kubernetes", f"cluster.log_group={group}") == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("trainstack logs: gone2: rank 0 has no pod and reading log group ")


def archive_at(client, group: str, stream: str, lines: list[str], at_ms: int) -> None:
    client.create_log_stream(logGroupName=group, logStreamName=stream)
    events = [{"timestamp": at_ms + i, "message": line} for i, line in enumerate(lines)]
    client.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def test_expired_trainjob_reads_each_ranks_newest_jobset_pod_stream(trainstack, log_group, capsys):
    client, group = log_group
    now_ms = int(time.time() * 1000)
    archive_at(client, group, "a-node-0-0-x1y2z.node", ["a rank0 step 1"], now_ms)
    # A restart left two pods for rank 1: the later attempt's stream is the one read.
    archive_at(client, group, "a-node-0-1-old00.node", ["a rank1 attempt 0"], now_ms)
    archive_at(client, group, "a-node-0-1-new11.node", ["a rank1 attempt 1"], now_ms + 1000)
    # Streams that share the prefix's characters but are not run a's rank pods' `node`.
    archive_at(client, group, "ab-node-0-0-q9w8e.node", ["run ab"], now_ms + 2000)
    archive_at(client, group, "a-node-0-1-node-0-0-r5t6y.node", ["run a-node-0-1"], now_ms + 3000)
    archive_at(client, group, "a-node-0-0-x1y2z.sidecar", ["not this container"], now_ms + 4000)
    where = ["backend=kubernetes", f"cluster.log_group={group}"]  # job.api=trainjob: default

    assert trainstack("logs", "a", *where) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["a rank0 step 1"]
    assert captured.err.splitlines() == [
        f"a: pod a-node-0-0-x1y2z is gone; reading its archived log from {group}"
    ]
    assert trainstack("logs", "a", "--rank", "1", *where) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["a rank1 attempt 1"]
    assert captured.err.splitlines() == [
        f"a: pod a-node-0-1-new11 is gone; reading its archived log from {group}"
        " (the newest of rank 1's 2)"
    ]
    assert trainstack("logs", "a", "--rank", "2", *where) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"trainstack logs: a: rank 2 has no pod and no archived log (log group {group})"
    ]


def finished_trainjob_without_pods(apiserver, trainstack, run_id: str, steps: int) -> list[str]:
    """Run a one-node TrainJob to the end, then delete its pods; their names (as the fake JobSet
    named them, random suffix and all)."""
    apiserver.trainer.plans[run_id] = [TrainPlan(steps=steps, step_seconds=0.01)]
    launched = trainstack(
        "launch", "--wait", "job.api=trainjob", f"run_id={run_id}", "compute.nodes=1", launch=True
    )
    assert launched == 0
    apiserver.trainer.wait_idle()
    names = []
    for pod in apiserver.list("pods", NAMESPACE, {"labels": {JOBSET_LABEL: ("=", run_id)}}):
        names.append(pod["metadata"]["name"])
        assert apiserver.remove("pods", names[-1], NAMESPACE) is not None
    return names


def test_finished_trainjob_whose_pods_were_deleted_reads_the_archive(
    apiserver, trainstack, log_group, capsys
):
    client, group = log_group
    (name,) = finished_trainjob_without_pods(apiserver, trainstack, "tjarch", steps=2)
    archive(client, group, f"{name}.node", ["archived trainjob line"])
    capsys.readouterr()

    assert trainstack("logs", "tjarch", f"cluster.log_group={group}") == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["archived trainjob line"]
    assert captured.err.splitlines() == [
        f"tjarch: pod {name} is gone; reading its archived log from {group}"
    ]


def test_trainjob_without_pods_or_archive_is_one_line_exit_2(
    apiserver, trainstack, log_group, capsys
):
    _, group = log_group
    finished_trainjob_without_pods(apiserver, trainstack, "tjnone", steps=1)
    capsys.readouterr()

    assert trainstack("logs", "tjnone", f"cluster.log_group={group}") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"trainstack logs: tjnone: rank 0 has no pod and no archived log (log group {group})"
    ]
