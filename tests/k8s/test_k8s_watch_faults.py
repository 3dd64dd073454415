"""Following a job through faults: dropped/expired watch streams, 5xx and read timeouts."""

from __future__ import annotations

import threading
import time
from itertools import pairwise

import pytest

from jobs.backends.kubernetes import following
from jobs.backends.kubernetes.client.api import ClusterError
from jobs.backends.kubernetes.client.kinds import PYTORCHJOB
from jobs.backends.kubernetes.client.state import job_state
from jobs.backends.kubernetes.client.submit import submit
from jobs.backends.kubernetes.client.watch import (
    FORBIDDEN_AFTER_OUTAGE_S,
    MAX_BACKOFF_S,
    MAX_OUTAGE_S,
    follow_log,
    wait_for_end,
)
from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_operator import JobPlan

SLOW = JobPlan(steps=8, step_seconds=0.1, kill_pod_at=4)


def state_history(apiserver, name: str) -> list[str]:
    """Every distinct consecutive state the job went through, from the server's event log."""
    states: list[str] = []
    for _, plural, _, obj in apiserver.events:
        if plural == "pytorchjobs" and obj["metadata"]["name"] == name:
            state = job_state(obj)
            if not states or states[-1] != state:
                states.append(state)
    return states


def follow(apiserver, cluster, name: str) -> list[str]:
    submit(cluster, [config_map(name), pytorch_job(name)])
    seen: list[str] = []
    job = wait_for_end(cluster, name, on_state=lambda state, _: seen.append(state))
    assert job is not None and job_state(job) == seen[-1]
    return seen


@pytest.mark.parametrize("fault", ["drop", "gone"])
def test_interrupted_watch_loses_and_repeats_nothing(apiserver, cluster, fault):
    apiserver.operator.default = SLOW
    if fault == "drop":
        apiserver.faults.drop_watch_after = [1, 0, 2]  # cut three streams mid-way
    else:
        apiserver.faults.gone_on_watch = 2  # history expired twice
    seen = follow(apiserver, cluster, "w1")
    history = state_history(apiserver, "w1")
    assert seen == history[-len(seen) :]  # nothing skipped after the first look
    assert seen[-2:] == ["Running", "Succeeded"] and "Restarting" in seen
    assert all(a != b for a, b in pairwise(seen))  # no repeats
    assert apiserver.count("GET", "watch=") >= 3


class FakeClock:
    """`cluster.sleep` advances it instead of sleeping: a long outage in no time."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        time.sleep(0.001)


def with_fake_clock(cluster) -> FakeClock:
    clock = FakeClock()
    cluster.sleep, cluster.clock = clock.sleep, lambda: clock.now
    return clock


def test_a_watch_that_keeps_dropping_gives_up_with_one_line(apiserver, cluster):
    apiserver.operator.default = JobPlan(hold=True)
    clock = with_fake_clock(cluster)
    apiserver.faults.drop_watch_after = [0] * 10_000
    submit(cluster, [config_map("w2"), pytorch_job("w2")])
    with pytest.raises(ClusterError) as caught:
        wait_for_end(cluster, "w2")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("watch PyTorchJob training/w2 failed ")
    assert clock.now > MAX_OUTAGE_S  # it kept trying for the whole tolerated outage


def test_a_ten_minute_api_outage_during_wait_is_ridden_out(apiserver, cluster):
    """Every request fails (503, then connection errors) for 10 simulated minutes while the job
    runs and finishes; the wait comes back with its real final state."""
    apiserver.operator.default = JobPlan(steps=20, step_seconds=0.05)
    clock = with_fake_clock(cluster)
    submit(cluster, [config_map("w8"), pytorch_job("w8")])
    apiserver.faults.outage = lambda: clock.now < 600
    seen: list[str] = []
    job = wait_for_end(cluster, "w8", on_state=lambda state, _: seen.append(state))
    assert clock.now >= 600
    assert job is not None and job_state(job) == "Succeeded" and seen[-1] == "Succeeded"
    assert apiserver.count("GET", "/pytorchjobs") > 10  # it kept asking all along


def test_server_errors_on_reads_are_retried_then_reported(apiserver, cluster):
    submit(cluster, [config_map("w3"), pytorch_job("w3")])
    before = apiserver.count("GET", "/pytorchjobs/w3")
    apiserver.faults.read_errors = [500, 503, 502]
    assert cluster.get_job("w3")["metadata"]["name"] == "w3"
    assert apiserver.count("GET", "/pytorchjobs/w3") - before == 4

    apiserver.faults.read_errors = [503] * 10
    before = apiserver.count("GET", "/pytorchjobs/w3")
    with pytest.raises(ClusterError) as caught:
        cluster.get_job("w3")
    assert str(caught.value) == (
        f"get PyTorchJob {NAMESPACE}/w3 failed after {cluster.retry.attempts} attempts: "
        "503 Service Unavailable: injected server error"
    )
    assert apiserver.count("GET", "/pytorchjobs/w3") - before == cluster.retry.attempts


def test_read_timeouts_are_retried_then_reported(apiserver, cluster):
    submit(cluster, [config_map("w4"), pytorch_job("w4")])
    apiserver.faults.stall_seconds = cluster.retry.read_timeout_s + 0.3
    apiserver.faults.read_stalls = 1
    assert cluster.get_job("w4") is not None  # the second attempt answers
    apiserver.faults.read_stalls = cluster.retry.attempts
    with pytest.raises(ClusterError) as caught:
        cluster.list_jobs()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"list PyTorchJobs in {NAMESPACE} failed after 4 attempts: ")
    assert "timed out" in message


def test_log_follows_a_killed_pod_into_its_replacement(apiserver, cluster):
    apiserver.operator.default = JobPlan(steps=6, step_seconds=0.1, kill_pod_at=3)
    submit(cluster, [config_map("w5"), pytorch_job("w5")])
    lines = list(follow_log(cluster, "w5", rank=0, poll_s=0.02))
    assert lines[-1] == "[w5-master-0] step 6 loss 0.667"
    assert "[w5-master-0] resumed from latest checkpoint" in lines
    assert len(lines) == len(set(lines))  # each line once
    resumed = lines.index("[w5-master-0] resumed from latest checkpoint")
    assert [line.split()[2] for line in lines[resumed + 1 :]] == ["4", "5", "6"]


def test_an_ended_pod_is_read_once_while_its_successor_is_awaited(apiserver, cluster):
    operator = apiserver.operator
    operator.default = JobPlan(hold=True, step_seconds=0.02)
    submit(cluster, [config_map("w6"), pytorch_job("w6", workers=0)])
    lines: list[str] = []
    follower = threading.Thread(
        target=lambda: lines.extend(follow_log(cluster, "w6", rank=0, poll_s=0.02)), daemon=True
    )
    follower.start()
    deadline = time.monotonic() + 5
    while not lines and time.monotonic() < deadline:
        time.sleep(0.01)
    operator.shutdown()  # the pod stops logging; the job stays Running
    pod = apiserver.update(
        "pods", "w6-master-0", NAMESPACE, lambda p: p["status"].update(phase="Failed")
    )
    operator._closed.add(pod["metadata"]["uid"])
    time.sleep(0.5)  # ~25 polls while no successor pod comes
    operator._condition("w6", NAMESPACE, "Succeeded", "PyTorchJobSucceeded", "completed")
    follower.join(5)
    assert not follower.is_alive()
    assert lines and lines == operator.log_lines(pod["metadata"]["uid"])
    assert apiserver.count("GET", "/pods/w6-master-0/log") <= 2


def test_a_silently_dropped_log_stream_is_reopened_not_waited_on_forever(
    apiserver, cluster, monkeypatch
):
    from jobs.backends.kubernetes.client import watch

    monkeypatch.setattr(watch, "LOG_READ_TIMEOUT_S", 0.5)
    apiserver.operator.default = JobPlan(steps=6, step_seconds=0.1)
    apiserver.faults.silent_log_streams = 1  # the first follow hears nothing, ever
    submit(cluster, [config_map("w7"), pytorch_job("w7", workers=0)])
    lines: list[str] = []
    follower = threading.Thread(
        target=lambda: lines.extend(follow_log(cluster, "w7", rank=0, poll_s=0.02)), daemon=True
    )
    follower.start()
    follower.join(20)
    assert not follower.is_alive(), "follow_log blocked on a dead connection"
    assert lines[-1] == "[w7-master-0] step 6 loss 0.667"
    assert len(lines) == len(set(lines)) == 6


def test_refusals_as_the_api_server_comes_back_are_waited_out(apiserver, cluster):
    """A restarted kube-apiserver answers 403 until its RBAC informers have synced: after an
    outage, the follow and the wait go on through a few of them (FORBIDDEN_AFTER_OUTAGE_S)."""
    apiserver.operator.default = JobPlan(steps=4, step_seconds=0.05)
    with_fake_clock(cluster)
    submit(cluster, [config_map("w9"), pytorch_job("w9", workers=0)])
    apiserver.faults.read_errors = [503] * cluster.retry.attempts + [403, 403, 403]
    lines = list(follow_log(cluster, "w9", rank=0, poll_s=0.02))
    assert lines[-1] == "[w9-master-0] step 4 loss 1.000"
    assert not apiserver.faults.read_errors  # it went through every refusal

    apiserver.faults.read_errors = [503] * cluster.retry.attempts + [403, 403]
    job = wait_for_end(cluster, "w9")
    assert job is not None and job_state(job) == "Succeeded"


def test_a_refusal_without_an_outage_is_final_at_once(apiserver, cluster):
    submit(cluster, [config_map("w10"), pytorch_job("w10")])
    apiserver.faults.read_errors = [403, 403]
    before = apiserver.count("GET", "/pytorchjobs/w10")
    with pytest.raises(ClusterError) as caught:
        wait_for_end(cluster, "w10")
    assert str(caught.value).startswith(f"watch PyTorchJob {NAMESPACE}/w10 failed: 403 ")
    assert apiserver.count("GET", "/pytorchjobs/w10") - before == 1


def test_refusals_that_go_on_after_an_outage_end_the_follow(apiserver, cluster):
    apiserver.operator.default = JobPlan(hold=True)
    clock = with_fake_clock(cluster)
    submit(cluster, [config_map("w11"), pytorch_job("w11")])
    apiserver.faults.read_errors = [503] * cluster.retry.attempts + [403] * 10_000
    with pytest.raises(ClusterError) as caught:
        list(follow_log(cluster, "w11", rank=0, poll_s=0.02))
    assert " failed: 403 " in str(caught.value)
    assert clock.now < FORBIDDEN_AFTER_OUTAGE_S + 2 * MAX_BACKOFF_S  # not the whole outage's


def test_a_log_stream_left_open_after_the_end_does_not_hold_the_follow(apiserver, cluster):
    """kwok's kubelet API keeps a log follow open after its container ended (the kubelet ends
    it): `logs -f` and `--wait` still end once the job has, with every line once."""
    apiserver.operator.default = JobPlan(steps=4, step_seconds=0.3)  # followed while it runs
    apiserver.faults.open_log_streams = True
    submit(cluster, [config_map("w12"), pytorch_job("w12", workers=0)])
    seen: list[str] = []
    outcome: list = []
    follower = threading.Thread(
        target=lambda: seen.extend(following.follow(cluster, "w12", 0, PYTORCHJOB, outcome, None)),
        daemon=True,
    )
    follower.start()
    follower.join(30)
    assert not follower.is_alive(), f"the follow did not end: {seen[-5:]}"
    steps = [line for line in seen if " step " in line]
    assert steps == [f"[w12-master-0] step {n} loss {4.0 / n:.3f}" for n in range(1, 5)]
    assert seen[-1] == "[trainstack] w12: Succeeded" and outcome[0].state == "succeeded"
