"""The pieces every trainstack pod is built of, whoever builds it: the PyTorchJob's and
TrainJob's pods (jobs/backends/kubernetes/manifests.py, trainjob.py), the runtimes `pulumi up`
installs (runtimes.py) and the data-prepare Job (data_prepare.py): where the pod goes (labels,
the GPU taint's toleration), its container's resources, /dev/shm, the scratch emptyDir a
read-only root needs, and the `restricted` security contexts. Plain dicts, as the API server
takes them. Light on purpose, like pod_facts: infra's path to the runtime renderer goes here.
"""

from __future__ import annotations

from catalog.pods import Resources

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
"""Set by EKS on managed node groups' nodes: ON_DEMAND or SPOT."""
GPU_TAINT = "nvidia.com/gpu"
IMAGE_UID = 10001
"""The trainer image's user (images/trainer/Dockerfile: `USER 10001:10001`)."""


SCRATCH_DIR = "/tmp"
SCRATCH_ENV = {"HOME": f"{SCRATCH_DIR}/home", "TMPDIR": SCRATCH_DIR}
"""The root filesystem is read-only: temporary files, the tokenizer staging dir, torch.compile's
and Triton's caches and everything a library keeps under HOME (Hugging Face, CUDA JIT, config)
go to the scratch emptyDir. `python -m trainer.smoke` checks each of them is writable."""
SCRATCH_SIZE = "50Gi"
"""The scratch emptyDir's sizeLimit (node-local ephemeral storage; inductor caches are GBs)."""


def scratch_volume() -> tuple[dict, dict, list[dict]]:
    """(volume, mount, env) giving a read-only-root pod the writable paths it needs."""
    volume = {"emptyDir": {"sizeLimit": SCRATCH_SIZE}, "name": "scratch"}
    mount = {"mountPath": SCRATCH_DIR, "name": "scratch"}
    env = [{"name": k, "value": v} for k, v in SCRATCH_ENV.items()]
    return volume, mount, env


def container_resources(res: Resources) -> dict:
    """Requests equal to limits (the Guaranteed QoS class GPU pods need)."""
    amounts = {"cpu": res.cpu, "memory": res.memory, "nvidia.com/gpu": str(res.gpus)}
    if res.efa:
        amounts["vpc.amazonaws.com/efa"] = str(res.efa)
    if res.hugepages_2mi:
        amounts["hugepages-2Mi"] = res.hugepages_2mi
    return {"limits": dict(amounts), "requests": dict(amounts)}


SHM_MOUNT = {"mountPath": "/dev/shm", "name": "dshm"}
GPU_TOLERATION = {"effect": "NoSchedule", "key": GPU_TAINT, "operator": "Exists"}


def shm_volume(size: str) -> dict:
    """NCCL and the data loader use shared memory; the default 64 MiB is far too small."""
    return {"emptyDir": {"medium": "Memory", "sizeLimit": size}, "name": "dshm"}


def security_contexts() -> tuple[dict, dict]:
    """(pod, container) contexts meeting the `restricted` Pod Security Standard: a non-root
    uid (the image's), no privilege escalation, every capability dropped, the runtime's
    default seccomp profile. EFA needs none back: the device plugin hands the pod its
    /dev/infiniband devices, the huge pages come as a resource, and memory locking (which
    libfabric needs unlimited) is the node runtime's memlock ulimit — CAP_IPC_LOCK would only
    matter if the pod had to raise that limit itself; the image self-test checks it."""
    seccomp = {"type": "RuntimeDefault"}
    pod = {
        "fsGroup": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "seccompProfile": dict(seccomp),
    }
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "seccompProfile": dict(seccomp),
    }
    return pod, container
