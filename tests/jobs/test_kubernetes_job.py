"""A job's cluster side (jobs/backends/kubernetes/kubernetes_job.py) is apart from the neutral
spec (jobs/spec.py): the cluster's keys and the job kind change the first, never the second."""

from __future__ import annotations

from tests.jobs.conftest import CLUSTER, build

P5 = [*CLUSTER, "compute=p5.48xlarge", "compute.nodes=2"]
ELSEWHERE = [
    "cluster.namespace=team-b",
    "cluster.service_account=team-b-trainer",
    "job.api=pytorchjob",
]


def test_the_cluster_and_the_job_kind_change_the_cluster_side_only():
    here, there = build(P5), build([*P5, *ELSEWHERE])
    assert here.spec == there.spec
    assert (here.kubernetes.namespace, there.kubernetes.namespace) == ("training", "team-b")
    assert there.kubernetes.service_account == "team-b-trainer"
    assert (here.kubernetes.api, there.kubernetes.api) == ("trainjob", "pytorchjob")
    assert here.kubernetes.runtime == "trainstack-p5-48xlarge" and there.kubernetes.runtime is None
