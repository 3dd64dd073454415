"""Faults a followed run survives with nobody resubmitting it: a pod deleted (the operator
recreates it and the trainer resumes), a node lost (all pods of a replica), bursts of 429 and
5xx from the API server and dropped watches — `--wait` reports the real end, and the client
never created the job twice. (The trainer's exact-loss resume after such a restart is proven
on real processes: tests/jobs/test_local_recovery.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from jobs.backends.base import SUCCEEDED
from jobs.backends.kubernetes.backend import KubernetesBackend
from jobs.backends.kubernetes.client.submit import submit
from jobs.backends.kubernetes.submitting import ClusterSettings
from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_operator import JobPlan


@pytest.mark.parametrize(
    "plan, faults",
    [
        (JobPlan(steps=8, step_seconds=0.05, kill_pod_at=3), {}),  # pod deleted
        (JobPlan(steps=8, step_seconds=0.05, lose_node_at=3), {}),  # node lost
        (JobPlan(steps=8, step_seconds=0.1), {"read_errors": [429, 429, 503, 500]}),
        (JobPlan(steps=8, step_seconds=0.1, kill_pod_at=2), {"drop_watch_after": [1, 0, 2]}),
    ],
    ids=["pod-deleted", "node-lost", "api-429-5xx-burst", "dropped-watches"],
)
def test_a_followed_run_survives_without_a_resubmit(
    apiserver, kubeconfig, fast_retry, fast_restarts, plan, faults
):
    apiserver.operator.default = plan
    backend = KubernetesBackend(
        ClusterSettings(str(kubeconfig), "fake", NAMESPACE, job_api="pytorchjob")
    )
    submit(backend.cluster, [config_map("f1"), pytorch_job("f1", workers=2)])
    # The backend knows the run's kind, so the faults land on the follow itself. (With the
    # backends' class-level state this came from the test before; run alone, the burst hit
    # the kind lookup's one call and failed it.)
    assert backend.find("f1") is not None
    for name, value in faults.items():
        setattr(apiserver.faults, name, value)
    lines: list[str] = []
    final = backend.wait("f1", on_line=lines.append)
    assert final.state == SUCCEEDED, lines
    assert apiserver.operator.created["f1"] == 1  # recovered in the cluster, not resubmitted
    assert final.retries == 0
    if plan.kill_pod_at or plan.lose_node_at:
        assert "[trainstack] f1: Restarting" in lines


def test_the_second_line_never_restarts_a_run_someone_else_replaced(
    apiserver, kubeconfig, fast_retry, fast_restarts
):
    apiserver.operator.plans["f2"] = [JobPlan(outcome="Failed", steps=2)]
    backend = KubernetesBackend(
        ClusterSettings(str(kubeconfig), "fake", NAMESPACE, job_api="pytorchjob")
    )
    ours = [config_map("f2"), pytorch_job("f2")]
    created = submit(backend.cluster, ours)
    # as schedule() records a run it submitted
    backend.submissions.record("f2", ours, 2, created.job["metadata"]["uid"])
    theirs = pytorch_job("f2", labels={"owner": "someone-else"})
    from jobs.backends.kubernetes.client.api import connect

    other_user = connect(str(kubeconfig), "fake", NAMESPACE, retry=fast_retry)

    def someone_resubmits(_: float) -> None:  # during our backoff
        current = apiserver.get("pytorchjobs", "f2", NAMESPACE)["metadata"]["uid"]
        if current == backend.submissions.uids["f2"]:
            apiserver.operator.plans["f2"] = [JobPlan(outcome="Failed", steps=2)]
            submit(other_user, [config_map("f2"), theirs])
            apiserver.operator.wait_idle()

    backend.cluster.sleep = someone_resubmits
    lines: list[str] = []
    backend.wait("f2", on_line=lines.append)
    assert "[trainstack] f2: replaced or deleted by someone else; not restarting" in lines
    assert apiserver.operator.created["f2"] == 2  # ours and theirs; never ours again
    labels = apiserver.get("pytorchjobs", "f2", NAMESPACE)["metadata"]["labels"]
    assert labels["owner"] == "someone-else"


def test_the_second_line_never_restarts_a_run_it_found_already_active(
    apiserver, cluster, trainstack, capsys
):
    # Someone else's run with the same id is running when our launch arrives: we follow it,
    # but it is not ours to restart when it fails.
    theirs = JobPlan(outcome="Failed", hold=True)
    apiserver.operator.plans["f3"] = [theirs]
    submit(cluster, [config_map("f3"), pytorch_job("f3")])

    def fail_once_our_launch_follows_it() -> None:
        deadline = time.monotonic() + 60
        while not apiserver.count("GET", "watch=True") and time.monotonic() < deadline:
            time.sleep(0.02)
        theirs.hold = False  # it ends, Failed, after its steps

    threading.Thread(target=fail_once_our_launch_follows_it, daemon=True).start()
    # --force: r23 refuses to resubmit another user's run without it.
    code = trainstack("launch", "--wait", "--force", "run_id=f3", "job.max_retries=2", launch=True)
    out = capsys.readouterr().out
    assert "f3: already active" in out and "[trainstack] f3: Failed" in out
    assert code != 0 and "restart 1/" not in out
    assert apiserver.operator.created["f3"] == 1
