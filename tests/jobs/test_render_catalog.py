"""For every GPU instance in the catalog, the rendered PyTorchJob pods ask for exactly its GPUs
and EFA interfaces, with the EFA environment only where EFA exists; a pod on part of an EFA node
still gets an EFA device (validation refuses a layout that would not)."""

from __future__ import annotations

import dataclasses

import pytest

from catalog import INSTANCE_TYPES
from catalog.pods import EFA_ENV, pod_resources
from tests.jobs.conftest import CLUSTER, build, files_under


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


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_one_gpu_of_an_efa_instance_still_gets_an_efa_device(name: str):
    """The pods that set FI_PROVIDER=efa are exactly the pods given an EFA device: one GPU of
    a g5 or p4d (a share of its interfaces below one) gets one."""
    instance = INSTANCE_TYPES[name]
    job = build(
        [
            *CLUSTER,
            "job.api=pytorchjob",
            f"compute={name}",
            "compute.gpus_per_node=1",
            "compute.nodes=2",
        ]
    )
    for template in pods(job.manifests).values():
        (container,) = template["spec"]["containers"]
        efa = int(container["resources"]["limits"].get("vpc.amazonaws.com/efa", 0))
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert (efa >= 1) == instance.has_efa, (name, efa)
        assert (env.get("FI_PROVIDER") == "efa") == (efa >= 1), (name, efa)
        assert efa <= instance.efa_interfaces


def test_every_gpu_count_of_an_efa_instance_gets_a_share_of_its_efa():
    for instance in INSTANCE_TYPES.values():
        for gpus in range(1, instance.gpus + 1):
            efa = pod_resources(instance, gpus).efa
            want = range(1, instance.efa_interfaces + 1) if instance.has_efa else range(0, 1)
            assert efa in want, (instance.name, gpus, efa)
        assert pod_resources(instance, instance.gpus).efa == instance.efa_interfaces


def test_a_layout_without_an_efa_device_is_refused(cli, workdir, monkeypatch):
    """An EFA share that rounds down to none (the `max(1, ...)` lost) would keep
    FI_PROVIDER=efa on pods with no device: validation names the key and renders nothing."""

    def rounded_down(instance, gpus):
        share = int(instance.efa_interfaces * gpus / instance.gpus)
        return dataclasses.replace(pod_resources(instance, gpus), efa=share)

    monkeypatch.setattr("jobs.spec.pod_resources", rounded_down)
    monkeypatch.setattr("jobs.validate_compute.pod_resources", rounded_down)
    result = cli("launch", *CLUSTER, "compute=p4d.24xlarge", "compute.gpus_per_node=1")
    assert result.code == 2, result
    (line,) = result.err.strip().splitlines()
    assert "compute.gpus_per_node: 1 of p4d.24xlarge" in line and "FI_PROVIDER=efa" in line, line
    assert "allowed: 2, 3, 4, 5, 6, 7, 8" in line, line
    assert result.out == "" and files_under(workdir) == []
    # The same layout through the real share is accepted.
    monkeypatch.undo()
    assert build([*CLUSTER, "compute=p4d.24xlarge", "compute.gpus_per_node=1"]).spec.resources.efa
