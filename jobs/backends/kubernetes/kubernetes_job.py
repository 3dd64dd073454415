"""What a job is on the cluster beyond the framework-neutral spec (jobs/spec.py): the namespace
and service account, the PyTorchJob's replica layout and run policy, the job kind and the
TrainJob's runtime, what the runtime carries, the capacity type the pods select and the FSx
claim they mount. Derived from the composed config by `kubernetes_job`, pure as `to_job_spec`;
the renderers (manifests.py, trainjob.py, network_policy.py, job_kinds.to_manifests) take
(spec, this). Not user config: the backend's options are the user's `backend.*` keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from catalog import get_instance_type
from catalog.pods import platform_env
from jobs.backends.kubernetes.client.kinds import KINDS
from jobs.backends.kubernetes.pod_facts import CPU_RUNTIME, default_group_name, gpu_runtime_name
from jobs.schema import CAPACITY_TYPES, LOCAL_CPU
from jobs.spec import elastic_of


@dataclass(frozen=True)
class RunPolicy:
    backoff_limit: int
    clean_pod_policy: str
    ttl_seconds_after_finished: int
    active_deadline_seconds: int | None
    suspend: bool = False
    """Created suspended for Kueue (job.queue): only Kueue un-suspends it, on admission."""


@dataclass(frozen=True)
class KubernetesJob:
    namespace: str
    service_account: str
    master_replicas: int
    """1 with `nodes - 1` workers; 0 for an elastic Worker-only job."""
    worker_replicas: int
    run_policy: RunPolicy
    kubernetes_version: str
    api: str = "trainjob"
    """`job.api`: trainjob or pytorchjob."""
    runtime: str | None = None
    """trainjob: the ClusterTrainingRuntime the TrainJob names (`runtimeRef`)."""
    platform_env: tuple[str, ...] = ()
    """Keys of the spec's `env` a trainstack runtime sets for every job on its node group
    (NCCL/EFA): a TrainJob leaves them to its runtime, a PyTorchJob carries them."""
    capacity_type: str | None = None
    """`eks.amazonaws.com/capacityType` the pods select (ON_DEMAND, SPOT), or None: any."""
    fsx: tuple[str, str] | None = None
    """(claim, mount path) of the stack's FSx volume mounted in every pod, or None."""


def runtime_for(cfg: Any) -> str | None:
    """`job.runtime`, else the runtime of the stack's node group of compute's instance type
    (the first listed), else the one a group named after the instance type would have."""
    if cfg.job.runtime:
        return cfg.job.runtime
    instance_type = cfg.compute.instance_type
    if instance_type is None:
        return CPU_RUNTIME
    for group in cfg.cluster.node_groups:
        if group.instance_type == instance_type:
            return gpu_runtime_name(group.name)
    return gpu_runtime_name(default_group_name(instance_type))


def kubernetes_job(cfg: Any) -> KubernetesJob:
    """The cluster side of the job composed (and validated) config `cfg` describes."""
    compute = cfg.compute
    local = compute.name == LOCAL_CPU
    instance = None if local else get_instance_type(compute.instance_type)
    elastic = elastic_of(cfg)
    return KubernetesJob(
        namespace=cfg.cluster.namespace,
        service_account=cfg.cluster.service_account,
        master_replicas=0 if elastic else 1,
        worker_replicas=compute.nodes if elastic else compute.nodes - 1,
        run_policy=RunPolicy(
            backoff_limit=cfg.job.max_restarts,
            clean_pod_policy=cfg.job.clean_pod_policy,
            ttl_seconds_after_finished=cfg.job.ttl_seconds_after_finished,
            active_deadline_seconds=cfg.job.active_deadline_seconds,
            suspend=bool(cfg.job.queue),
        ),
        kubernetes_version=str(cfg.cluster.kubernetes_version),
        api=cfg.job.api,
        runtime=runtime_for(cfg) if KINDS[cfg.job.api].on_runtime else None,
        platform_env=tuple(platform_env(instance)),
        capacity_type=None if local else CAPACITY_TYPES[compute.capacity],
        fsx=(cfg.storage.fsx_claim, cfg.storage.fsx_mount) if cfg.storage.fsx else None,
    )
