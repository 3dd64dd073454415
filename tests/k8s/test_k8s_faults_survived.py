"""Faults a followed run survives with nobody resubmitting it: a pod deleted (the operator
recreates it and the trainer resumes), a node lost (all pods of a replica), bursts of 429 and
5xx from the API server and dropped watches — `--wait` reports the real end, and the client
never created the job twice. (The trainer's exact-loss resume after such a restart is proven
on real processes: tests/jobs/test_local_recovery.py.)"""

from __future__ import annotations

import pytest

from jobs.backends.base import SUCCEEDED
from jobs.backends.kubernetes import ClusterSettings, KubernetesBackend
from jobs.k8s.submit import submit
from tests.k8s.conftest import NAMESPACE, config_map, pytorch_job
from tests.k8s.fake_operator import JobPlan


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
    backend = KubernetesBackend(ClusterSettings(str(kubeconfig), "fake", NAMESPACE))
    submit(backend.cluster, [config_map("f1"), pytorch_job("f1", workers=2)])
    for name, value in faults.items():
        setattr(apiserver.faults, name, value)
    lines: list[str] = []
    final = backend.wait("f1", on_line=lines.append)
    assert final.state == SUCCEEDED, lines
    assert apiserver.operator.created["f1"] == 1  # recovered in the cluster, not resubmitted
    assert final.retries == 0
    if plan.kill_pod_at or plan.lose_node_at:
        assert "[trainstack] f1: Restarting" in lines
