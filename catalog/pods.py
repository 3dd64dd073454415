"""What a worker is given on an instance type, whatever runs it: its share of the node
(`Resources`, a pod's on a cluster) and the environment every job on the node needs
(`platform_env`: NCCL's failure detection, libfabric's EFA settings). Facts about instance
types, so here beside them: the launch pipeline (a job's spec, its checks) and the Kubernetes
renderers (jobs, and the runtimes `pulumi up` installs) read them alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.instances import InstanceType

HUGEPAGES_2MI = "5120Mi"
"""libfabric's EFA provider registers its buffers in 2 MiB huge pages."""

# NCCL over EFA (aws-ofi-nccl): set only on instances that have EFA.
EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_SOCKET_IFNAME": "^lo,docker",
    "NCCL_DEBUG": "WARN",
}
NCCL_HEARTBEAT_TIMEOUT_S = 300
# How a GPU rank notices a dead peer or a hung collective (torch's ProcessGroupNCCL): the
# watchdog aborts a collective after trainer.collective_timeout_s and tears the process down
# (async error handling 1), so torchrun restarts the ranks; the heartbeat monitor kills a rank
# whose watchdog itself is stuck (e.g. inside a hung CUDA call) after this many seconds.
NCCL_RECOVERY_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(NCCL_HEARTBEAT_TIMEOUT_S),
}


@dataclass(frozen=True)
class Resources:
    """Per pod; requests equal limits so GPU pods get the Guaranteed QoS class."""

    cpu: str
    memory: str
    gpus: int
    efa: int
    hugepages_2mi: str | None
    shm_size: str
    """sizeLimit of the memory-backed /dev/shm emptyDir (counts against `memory`)."""


def pod_resources(instance: InstanceType, gpus: int) -> Resources:
    """A share of the node proportional to the GPUs used, less headroom for the node's
    daemons (kubelet, EFA/NVIDIA device plugins, CNI, log agents)."""
    share = gpus / instance.gpus
    cpu = int((instance.vcpus - max(2, instance.vcpus // 12)) * share)
    memory_gib = int((instance.memory_gib - max(8, instance.memory_gib // 10)) * share)
    efa = max(1, int(instance.efa_interfaces * share)) if instance.has_efa else 0
    return Resources(
        cpu=str(cpu),
        memory=f"{memory_gib}Gi",
        gpus=gpus,
        efa=efa,
        hugepages_2mi=HUGEPAGES_2MI if instance.has_efa else None,
        shm_size=f"{max(1, memory_gib // 4)}Gi",
    )


def platform_env(instance: InstanceType | None) -> dict[str, str]:
    """What every job on `instance` needs whatever it runs: NCCL's failure detection and, with
    EFA, libfabric's provider settings. A trainstack runtime carries it
    (jobs.backends.kubernetes.runtimes)."""
    env: dict[str, str] = {}
    if instance is not None and instance.gpus:
        env.update(NCCL_RECOVERY_ENV)
    if instance is not None and instance.has_efa:
        env.update(EFA_ENV)
        if instance.gpudirect_rdma:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env
