"""A seeded fake cluster and the manifests the Kubernetes tests and benchmarks submit to it
(the fake apiserver's contents: CRDs, namespace, service account, GPU nodes)."""

from __future__ import annotations

from testing_support.k8s.fake_apiserver import FakeKubeApiServer

NAMESPACE = "training"
GPU_TYPE = "p4d.24xlarge"


def put_crd(server: FakeKubeApiServer, kind) -> None:
    """The served, Established CRD of a job kind (a
    jobs.backends.kubernetes.client.kinds.JobKind)."""
    server.put(
        "customresourcedefinitions",
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "metadata": {"name": kind.crd_name},
            "spec": {
                "group": kind.group,
                "names": {"kind": kind.kind, "plural": kind.plural},
                "scope": "Namespaced",
                "versions": [{"name": kind.version, "served": True, "storage": True}],
            },
            "status": {"conditions": [{"type": "Established", "status": "True"}]},
        },
    )


def seed_cluster(server: FakeKubeApiServer, nodes: int = 2, instance_type: str = GPU_TYPE) -> None:
    """A ready cluster: the CRD, namespace, service account and GPU nodes with EFA."""
    from jobs.backends.kubernetes.client.kinds import PYTORCHJOB

    put_crd(server, PYTORCHJOB)
    server.put("namespaces", {"apiVersion": "v1", "metadata": {"name": NAMESPACE}})
    server.put("serviceaccounts", {"apiVersion": "v1", "metadata": {"name": "trainer"}}, NAMESPACE)
    for index in range(nodes):
        add_node(server, f"gpu-{index}", instance_type)


def seed_trainer(server: FakeKubeApiServer, instance_type: str = GPU_TYPE) -> None:
    """Kubeflow Trainer as `pulumi up` installs it: the TrainJob CRD and trainstack's runtime
    of a node group of `instance_type` (named as a job without a stack expects)."""
    from catalog import INSTANCE_TYPES
    from jobs.backends.kubernetes.client.kinds import TRAINJOB
    from jobs.backends.kubernetes.pod_facts import default_group_name
    from jobs.backends.kubernetes.runtimes import gpu_runtime

    put_crd(server, TRAINJOB)
    group = default_group_name(instance_type)
    server.put("clustertrainingruntimes", gpu_runtime(group, INSTANCE_TYPES[instance_type]))


def add_node(
    server: FakeKubeApiServer,
    name: str,
    instance_type: str,
    gpus: int = 8,
    efa: int = 4,
    ready: bool = True,
    taints: list[dict] | None = None,
):
    server.put(
        "nodes",
        {
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "labels": {"node.kubernetes.io/instance-type": instance_type},
            },
            "spec": {"taints": taints or []},
            "status": {
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "allocatable": {
                    "cpu": "95",
                    "memory": "1100Gi",
                    "nvidia.com/gpu": str(gpus),
                    "vpc.amazonaws.com/efa": str(efa),
                },
            },
        },
    )


MANAGED = {"app.kubernetes.io/managed-by": "trainstack"}


def pytorch_job(name: str, workers: int = 1, labels: dict | None = None) -> dict:
    """A minimal PyTorchJob manifest (what materialization would produce, trimmed: always
    trainstack's managed-by label)."""
    template = {"spec": {"containers": [{"name": "pytorch", "image": "registry.example.com/t:v1"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {**MANAGED, **(labels or {})}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": workers, "template": template},
            }
        },
    }


def config_map(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "labels": dict(MANAGED)},
        "data": {"config.yaml": "seed: 0\n"},
    }
