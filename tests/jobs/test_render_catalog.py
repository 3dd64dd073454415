"""For every GPU instance in the catalog, the rendered PyTorchJob pods ask for exactly its GPUs
and EFA interfaces, with the EFA environment only where EFA exists."""

from __future__ import annotations

import pytest

from catalog import INSTANCE_TYPES
from jobs.spec import EFA_ENV
from tests.jobs.conftest import CLUSTER, build


def pods(manifests: list[dict]) -> dict[str, dict]:
    job = next(m for m in manifests if m["kind"] == "PyTorchJob")
    return {k: r["template"] for k, r in job["spec"]["pytorchReplicaSpecs"].items()}


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_pods_ask_for_the_catalogs_gpus_and_efa(name: str):
    instance = INSTANCE_TYPES[name]
    job = build([*CLUSTER, "job.api=pytorchjob", f"compute={name}", "compute.nodes=2"])
    pytorch_job = job.manifests[1]
    assert pytorch_job["spec"]["nprocPerNode"] == str(instance.gpus)
    templates = pods(job.manifests)
    assert set(templates) == {"Master", "Worker"}
    for template in templates.values():
        spec = template["spec"]
        (container,) = spec["containers"]
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert requests == limits
        assert requests["nvidia.com/gpu"] == str(instance.gpus)
        assert requests.get("vpc.amazonaws.com/efa") == (
            str(instance.efa_interfaces) if instance.has_efa else None
        )
        assert ("hugepages-2Mi" in requests) == instance.has_efa
        # Headroom for the node's daemons.
        assert 0 < int(requests["cpu"]) < instance.vcpus
        assert 0 < int(requests["memory"].removesuffix("Gi")) < instance.memory_gib
        env = {e["name"]: e.get("value") for e in container["env"]}
        for key, value in EFA_ENV.items():
            assert env.get(key) == (value if instance.has_efa else None)
        assert ("FI_EFA_USE_DEVICE_RDMA" in env) == (instance.has_efa and instance.gpudirect_rdma)
        assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": name}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]


def test_partial_node_scales_resources_down():
    full = build([*CLUSTER, "compute=p5.48xlarge"]).spec.resources
    half = build([*CLUSTER, "compute=p5.48xlarge", "compute.gpus_per_node=4"]).spec.resources
    assert (half.gpus, half.efa) == (4, 16)
    assert int(half.cpu) < int(full.cpu)
