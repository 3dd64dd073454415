"""Preflight against the fake cluster: each failure is one line naming what to change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.backends.kubernetes.client.preflight import (
    NodeGroup,
    PreflightError,
    PreflightRequest,
    preflight,
)
from testing_support.k8s.cluster import GPU_TYPE, NAMESPACE, add_node

EFA = 4  # p4d.24xlarge's EFA interfaces in the catalog


def request(nodes: int = 2, groups: tuple[NodeGroup, ...] = ()) -> PreflightRequest:
    return PreflightRequest("trainer", GPU_TYPE, nodes, 8, EFA, groups)


def problems(cluster, req: PreflightRequest) -> list[str]:
    with pytest.raises(PreflightError) as caught:
        preflight(cluster, req)
    head, *lines = str(caught.value).splitlines()
    assert head.startswith(f"preflight failed ({len(lines)} problem(s)")
    return [line.removeprefix("  - ") for line in lines]


def test_a_ready_cluster_passes(cluster):
    preflight(cluster, request(nodes=2))


def test_missing_crd(apiserver, cluster):
    apiserver.remove("customresourcedefinitions", "pytorchjobs.kubeflow.org")
    assert problems(cluster, request()) == [
        "CRD pytorchjobs.kubeflow.org is not installed: install the Kubeflow training operator "
        "(the infra stack does) before submitting PyTorchJobs"
    ]


def test_missing_namespace_and_service_account(apiserver, cluster):
    apiserver.remove("serviceaccounts", "trainer", NAMESPACE)
    apiserver.remove("namespaces", NAMESPACE)
    assert problems(cluster, request()) == [
        "namespace 'training' (cluster.namespace) does not exist",
        "service account 'trainer' (cluster.service_account) does not exist in namespace "
        "'training'",
    ]


def test_too_few_fitting_nodes_and_no_node_group(apiserver, cluster):
    add_node(apiserver, "small-efa", GPU_TYPE, gpus=8, efa=1)  # not enough EFA interfaces
    assert problems(cluster, request(nodes=3)) == [
        f"compute.nodes=3 needs 3 schedulable {GPU_TYPE} node(s) with 8 nvidia.com/gpu and "
        f"{EFA} vpc.amazonaws.com/efa allocatable; the cluster has 2 such node(s) (3 of that "
        f"type) and no node group of {GPU_TYPE} in cluster.node_groups"
    ]


def test_node_group_too_small(cluster):
    groups = (NodeGroup("gpu-a", GPU_TYPE, 3), NodeGroup("other", "p5.48xlarge", 10))
    (problem,) = problems(cluster, request(nodes=4, groups=groups))
    assert problem.endswith("node group(s) gpu-a can grow to 3 (cluster.node_groups[].max_size)")


def test_a_node_group_that_can_scale_passes(cluster):
    preflight(cluster, request(nodes=4, groups=(NodeGroup("gpu-a", GPU_TYPE, 4),)))


def test_cli_preflight_failure_is_one_line_and_nothing_is_submitted(apiserver, trainstack, capsys):
    apiserver.remove("customresourcedefinitions", "pytorchjobs.kubeflow.org")
    assert trainstack("launch", "run_id=pf1", launch=True) == 2
    err = capsys.readouterr().err
    assert "CRD pytorchjobs.kubeflow.org is not installed" in err
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    assert apiserver.list("configmaps", NAMESPACE) == []
    # --skip-preflight bypasses the checks (the fake still accepts the job).
    assert trainstack("launch", "--skip-preflight", "run_id=pf1", launch=True) == 0
    assert apiserver.get("pytorchjobs", "pf1", NAMESPACE) is not None


def test_a_crd_the_submitter_may_not_read_is_a_warning_not_a_failure(apiserver, cluster):
    # Namespace-only RBAC is normal on shared clusters; CRDs are cluster-scoped.
    apiserver.faults.read_errors = [403]  # the first read: the CRD
    assert preflight(cluster, request()) == [
        "get CRD pytorchjobs.kubeflow.org failed: 403 Forbidden: injected server error "
        "(no permission: CRD check skipped)"
    ]


def busy(apiserver, node: str, gpus: int) -> None:
    apiserver.put(
        "pods",
        {
            "apiVersion": "v1",
            "metadata": {"name": f"other-{node}"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
                ],
            },
            "status": {"phase": "Running"},
        },
        "someone-else",
    )


def test_nodes_busy_with_other_pods_make_the_job_wait_not_fail(apiserver, cluster):
    busy(apiserver, "gpu-0", 8)  # today: counted as 8 free GPUs
    (warning,) = preflight(cluster, request(nodes=2))
    assert warning == (
        f"only 1 of the 2 {GPU_TYPE} node(s) that fit the job have its GPUs free now: it waits "
        "until others finish"
    )


def test_not_ready_and_tainted_nodes_do_not_count(apiserver, cluster):
    add_node(apiserver, "not-ready", GPU_TYPE, ready=False)
    taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
    add_node(apiserver, "unreachable", GPU_TYPE, taints=[taint])
    (problem,) = problems(cluster, request(nodes=3))
    assert "the cluster has 2 such node(s) (4 of that type)" in problem


def kueue_objects(apiserver, gpus: str = "16") -> None:
    apiserver.put(
        "localqueues",
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"name": "training"}}
        | {"spec": {"clusterQueue": "trainstack"}},
        NAMESPACE,
    )
    resources = [
        {"name": "nvidia.com/gpu", "nominalQuota": gpus},
        {"name": "vpc.amazonaws.com/efa", "nominalQuota": "8"},
    ]
    apiserver.put(
        "clusterqueues",
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"name": "trainstack"}}
        | {"spec": {"resourceGroups": [{"flavors": [{"name": "p4d", "resources": resources}]}]}},
    )


def queued(nodes: int = 2, queue: str = "training") -> PreflightRequest:
    return PreflightRequest("trainer", GPU_TYPE, nodes, 8, EFA, (), queue=queue)


def test_the_queue_must_exist_and_the_job_must_fit_its_quota(apiserver, cluster):
    assert problems(cluster, queued()) == [
        "job.queue: LocalQueue 'training' does not exist in namespace 'training' (the stack's "
        "is in job.queue of your stack/<stack>.yaml)"
    ]
    kueue_objects(apiserver)
    assert preflight(cluster, queued(nodes=2)) == []
    add_node(apiserver, "gpu-2", GPU_TYPE)
    assert problems(cluster, queued(nodes=3)) == [
        "compute.nodes=3 needs 24 nvidia.com/gpu in all; ClusterQueue 'trainstack' "
        "(job.queue=training) has a nominal quota of 16: it could never be admitted"
    ]


def test_a_gpu_job_counts_only_the_flavors_that_hold_gpus(apiserver, cluster):
    """The stack's `system` flavor (0 GPUs) can never hold a GPU pod set: its CPU is no room."""
    kueue_objects(apiserver)
    gpu = [
        {"name": "cpu", "nominalQuota": "192"},
        {"name": "nvidia.com/gpu", "nominalQuota": "16"},
        {"name": "vpc.amazonaws.com/efa", "nominalQuota": "8"},
    ]
    system = [
        {"name": "cpu", "nominalQuota": "64"},
        {"name": "nvidia.com/gpu", "nominalQuota": "0"},
        {"name": "vpc.amazonaws.com/efa", "nominalQuota": "0"},
    ]
    flavors = [{"name": "p4d", "resources": gpu}, {"name": "system", "resources": system}]
    apiserver.put(
        "clusterqueues",
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"name": "trainstack"}}
        | {"spec": {"resourceGroups": [{"flavors": flavors}]}},
    )
    fits_with_system_only = replace(queued(nodes=2), cpu_per_node=120)  # 240 <= 192 + 64
    assert problems(cluster, fits_with_system_only) == [
        "compute.nodes=2 needs 240 cpu in all; ClusterQueue 'trainstack' "
        "(job.queue=training) has a nominal quota of 192: it could never be admitted"
    ]
    assert preflight(cluster, replace(queued(nodes=2), cpu_per_node=96)) == []
