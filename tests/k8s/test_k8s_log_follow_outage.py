"""A log follow through an API server restart (the kube-apiserver or etcd going away under
`logs -f`): the stream is cut mid-way and every request fails (503) for a while. Each line is
shown once and none is dropped; when the container it was reading is gone by the time the
server is back, one line says after which line of which pod lines may be missing."""

from __future__ import annotations

import threading
import time
from itertools import pairwise

import pytest
import yaml

from jobs.backends.kubernetes.client.api import connect
from jobs.backends.kubernetes.client.state import job_state
from jobs.backends.kubernetes.client.submit import submit
from jobs.backends.kubernetes.client.watch import follow_log, wait_for_end
from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_operator import JobPlan
from testing_support.k8s.restartable_proxy import RestartableProxy
from tests.k8s.test_k8s_watch_faults import state_history

GAP = "may be missing lines"


def master(apiserver, name: str) -> dict | None:
    return apiserver.get("pods", f"{name}-master-0", NAMESPACE)


def log_of(apiserver, pod: dict | None) -> list[str]:
    return [] if pod is None else apiserver.operator.log_lines(pod["metadata"]["uid"])


def test_a_log_cut_by_an_api_restart_resumes_with_each_line_once(apiserver, cluster):
    apiserver.operator.default = JobPlan(steps=12, step_seconds=0.05)
    apiserver.faults.drop_log_after = [3]  # the restart cuts the follow after its third line
    # ... and refuses every request until the pod has written its ninth.
    apiserver.faults.outage = lambda: 3 < len(log_of(apiserver, master(apiserver, "o1"))) < 9
    submit(cluster, [config_map("o1"), pytorch_job("o1", workers=0)])
    lines = list(follow_log(cluster, "o1", rank=0, poll_s=0.02))
    assert lines == log_of(apiserver, master(apiserver, "o1"))  # all 12, in order, once
    assert len(lines) == 12
    assert apiserver.count("GET", "/pods/o1-master-0/log") >= 2  # it did reconnect


def test_a_log_cut_as_the_job_ends_is_still_read_to_its_end(apiserver, cluster):
    apiserver.operator.default = JobPlan(steps=8, step_seconds=0.05)
    apiserver.faults.drop_log_after = [2]

    def away() -> bool:  # from the cut until after the job ended
        job = apiserver.get("pytorchjobs", "o2", NAMESPACE)
        return len(log_of(apiserver, master(apiserver, "o2"))) > 2 and (
            job is None or job_state(job) != "Succeeded"
        )

    apiserver.faults.outage = away
    submit(cluster, [config_map("o2"), pytorch_job("o2", workers=0)])
    lines = list(follow_log(cluster, "o2", rank=0, poll_s=0.02))
    assert job_state(apiserver.get("pytorchjobs", "o2", NAMESPACE)) == "Succeeded"
    assert lines == log_of(apiserver, master(apiserver, "o2"))
    assert lines[-1] == "[o2-master-0] step 8 loss 0.500"


def test_a_pod_replaced_while_the_api_was_away_leaves_one_line_saying_where(apiserver, cluster):
    apiserver.operator.default = JobPlan(steps=10, step_seconds=0.05, kill_pod_at=5)
    apiserver.faults.drop_log_after = [2]
    first: list[str] = []  # the first pod's uid

    def away() -> bool:  # from the cut until the operator replaced the pod
        pod = master(apiserver, "o3")
        if pod is None:
            return bool(first)
        uid = pod["metadata"]["uid"]
        first[:] = first or [uid]
        return uid == first[0] and len(apiserver.operator.log_lines(uid)) > 2

    apiserver.faults.outage = away
    submit(cluster, [config_map("o3"), pytorch_job("o3", workers=0)])
    lines = list(follow_log(cluster, "o3", rank=0, poll_s=0.02))
    old = apiserver.operator.log_lines(first[0])
    gaps = [i for i, line in enumerate(lines) if GAP in line]
    assert len(gaps) == 1, lines
    gap = gaps[0]
    assert lines[gap] == (
        "[trainstack] o3: rank 0's log may be missing lines after line 2 of pod o3-master-0: "
        "its container ended while the log stream was cut"
    )
    assert lines[:gap] == old[:2]  # what it showed of the old pod, once
    assert lines[gap + 1 :] == log_of(apiserver, master(apiserver, "o3"))  # the new one, whole
    assert lines[gap + 1] == "[o3-master-0] resumed from latest checkpoint"


@pytest.fixture
def restartable(apiserver, tmp_path, fast_retry):
    """(the proxy, a Cluster connected through it): the API server as a restart shows it."""
    proxy = RestartableProxy(int(apiserver.url.rsplit(":", 1)[1])).up()
    config = yaml.safe_load(apiserver.write_kubeconfig(tmp_path / "direct").read_text())
    config["clusters"][0]["cluster"]["server"] = proxy.url
    (tmp_path / "via-proxy").write_text(yaml.safe_dump(config))
    yield proxy, connect(str(tmp_path / "via-proxy"), "fake", NAMESPACE, retry=fast_retry)
    proxy.down()


def test_a_restart_under_wait_and_follow_loses_and_repeats_nothing(apiserver, restartable):
    """Every connection reset, the port refusing connections while the job goes on, then the
    server back on the same port: the wait reports each state once and the real end, the
    follow every line once."""
    proxy, cluster = restartable
    apiserver.operator.default = JobPlan(steps=14, step_seconds=0.05)
    submit(cluster, [config_map("o4"), pytorch_job("o4", workers=0)])
    states: list[str] = []
    lines: list[str] = []
    ended: list[dict | None] = []
    followers = [
        threading.Thread(
            target=lambda: ended.append(
                wait_for_end(cluster, "o4", on_state=lambda s, _: states.append(s))
            )
        ),
        threading.Thread(target=lambda: lines.extend(follow_log(cluster, "o4", poll_s=0.02))),
    ]
    for follower in followers:
        follower.start()
    deadline = time.monotonic() + 10
    while len(lines) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    before = proxy.connections
    proxy.down()
    while len(log_of(apiserver, master(apiserver, "o4"))) < 9 and time.monotonic() < deadline:
        time.sleep(0.005)
    proxy.up()
    for follower in followers:
        follower.join(20)
    assert not any(f.is_alive() for f in followers)
    assert proxy.connections > before  # both came back through the new listener
    assert lines == log_of(apiserver, master(apiserver, "o4"))  # all 14, once, in order
    assert ended and job_state(ended[0]) == "Succeeded" == states[-1]
    assert all(a != b for a, b in pairwise(states))
    assert states == state_history(apiserver, "o4")[-len(states) :]
