"""The kubernetes backend's own checks on a job: `job.api` and what the chosen job kind cannot
express, `job.runtime` naming one of trainstack's ClusterTrainingRuntimes, and the `cluster.*`
names and approvals (Secrets, priority classes) the API server and the stack would refuse."""

from __future__ import annotations

from typing import Any

from jobs.backends.kubernetes.client.kinds import KINDS, RAYJOB
from jobs.backends.kubernetes.pod_facts import CPU_RUNTIME, RUNTIME_PREFIX, gpu_runtime_name
from jobs.backends.kubernetes.runtimes import RUNTIME_GRACE_S
from jobs.errors import JobConfigError
from jobs.references import DNS1123_SUBDOMAIN, dns1123_label_problem, dns1123_subdomain_problem
from jobs.schema import LOCAL_CPU, JobConfig
from jobs.spec import elastic_of
from jobs.validate_common import in_pods, listed

_TRAINJOB_FIXED = {
    "clean_pod_policy": "the JobSet's pods are kept until its TTL",
    "ttl_seconds_after_finished": "trainstack deletes a finished TrainJob after 7 days",
}
"""job keys a TrainJob cannot set (the runtime decides): allowed only at their default."""


def check_job_api(cfg: Any) -> None:
    """`job.api` is one of the job kinds (client.kinds.KINDS), and what the chosen API cannot
    express is refused rather than dropped (Kubeflow Trainer v2.2 removed ElasticPolicy;
    cleanup and TTL are the runtime's)."""
    job = cfg.job
    if job.api not in KINDS:
        raise JobConfigError("job.api", f"{job.api!r} is not allowed; allowed: {listed(KINDS)}")
    if job.runtime is not None and not DNS1123_SUBDOMAIN.match(job.runtime):
        raise JobConfigError("job.runtime", f"{job.runtime!r} is not a DNS-1123 name")
    own_checks = KIND_CONFIG_CHECKS.get(job.api)
    if own_checks is not None:
        own_checks(cfg)
        return
    if not KINDS[job.api].on_runtime or not in_pods(cfg):
        if job.runtime is not None and in_pods(cfg):
            on_runtime = "|".join(kind.api for kind in KINDS.values() if kind.on_runtime)
            raise JobConfigError("job.runtime", f"only job.api={on_runtime} runs on a runtime")
        return
    check_runtime_is_trainstacks(cfg)
    if elastic_of(cfg) is not None:
        raise JobConfigError(
            "job.elastic",
            "elastic min/max nodes need job.api=pytorchjob (Kubeflow Trainer v2 has no "
            "elastic policy); allowed with trainjob: null",
        )
    source = cfg.model.init_from
    if cfg.compute.name != LOCAL_CPU and source is not None and str(source).startswith("hf://"):
        raise JobConfigError(
            "model.init_from",
            f"{source!r}: an hf:// model needs job.api=pytorchjob on a cluster (a TrainJob has "
            "no model-initializer step yet); allowed with trainjob: a path or s3:// URL",
        )
    grace = job.termination_grace_period_seconds
    if job.queue and isinstance(grace, int) and grace > RUNTIME_GRACE_S:
        # Kueue rewrites a queued TrainJob with Trainer types that have no grace-period patch
        # (jobs/backends/kubernetes/trainjob.py): its pods get the runtime's.
        raise JobConfigError(
            "job.termination_grace_period_seconds",
            f"{grace} is above what a queued TrainJob gets (its runtime's {RUNTIME_GRACE_S}: "
            f"Kueue keeps no per-job grace period); allowed with job.queue: up to "
            f"{RUNTIME_GRACE_S}, or job.api=pytorchjob",
        )
    defaults = JobConfig()
    for key, why in _TRAINJOB_FIXED.items():
        if job[key] != getattr(defaults, key):
            raise JobConfigError(
                f"job.{key}",
                f"not settable with job.api=trainjob ({why}); allowed: "
                f"{getattr(defaults, key)}, or job.api=pytorchjob",
            )


_RAYJOB_FIXED = {
    "clean_pod_policy": "KubeRay deletes the Ray cluster when the job ends",
    "ttl_seconds_after_finished": "the RayJob's cluster is deleted when the job ends",
    "runtime": "a RayJob runs on a Ray cluster of its own, not a ClusterTrainingRuntime",
}


def check_rayjob_config(cfg: Any) -> None:
    """What job.api=rayjob runs (a Ray program: runner=command, the program started once by
    Ray's Jobs API, its workers by Ray) and what it cannot express, refused in one line."""
    job = cfg.job
    if cfg.runner.name != "command":
        raise JobConfigError(
            "runner",
            f"runner={cfg.runner.name} runs under torchrun, not Ray; allowed with "
            "job.api=rayjob: runner=command (a Ray program: VERL, a Ray Train TorchTrainer "
            "script), or job.api=trainjob|pytorchjob for the built-in trainer and runner=hf",
        )
    if cfg.runner.torchrun:
        raise JobConfigError(
            "runner.torchrun",
            "true starts torchrun, but Ray starts the workers of a RayJob; allowed with "
            "job.api=rayjob: false",
        )
    if cfg.runner.workdir is not None:
        raise JobConfigError(
            "runner.workdir",
            "is not shipped to a Ray cluster's workers yet; allowed with job.api=rayjob: null "
            "(the image carries the program)",
        )
    if elastic_of(cfg) is not None:
        raise JobConfigError(
            "job.elastic",
            "Kueue admits an autoscaled Ray cluster only as an elastic workload, which "
            "trainstack does not make; allowed with rayjob: null",
        )
    if cfg.compute.name == LOCAL_CPU and in_pods(cfg):
        raise JobConfigError(
            "compute", "local_cpu has no nodes for a Ray cluster; allowed: a GPU instance type"
        )
    defaults = JobConfig()
    for key, why in _RAYJOB_FIXED.items():
        if job[key] != getattr(defaults, key):
            raise JobConfigError(
                f"job.{key}",
                f"not settable with job.api=rayjob ({why}); allowed: {getattr(defaults, key)}",
            )


def stack_runtimes(node_groups: Any) -> list[str]:
    """The ClusterTrainingRuntimes a stack installs
    (jobs.backends.kubernetes.runtimes.cluster_training_runtimes):
    one per GPU node group, then the CPU runtime."""
    return [*(gpu_runtime_name(group.name) for group in node_groups), CPU_RUNTIME]


def check_runtime_is_trainstacks(cfg: Any) -> None:
    """`job.runtime` names one of trainstack's runtimes, on every path (the preflight's label
    check is off where the service runs with backend.preflight=false): another runtime (an
    admin's, another team's) could carry any pod template (privileged, host paths). With the
    stack's node groups known the name must be one the stack installs; without, a name
    trainstack would install (the preflight then checks its label)."""
    runtime = cfg.job.runtime
    if runtime is None:
        return  # runtime_for() picks one of the stack's
    installed = stack_runtimes(cfg.cluster.node_groups)
    known = runtime in installed if cfg.cluster.node_groups else runtime.startswith(RUNTIME_PREFIX)
    if not known:
        allowed = listed(installed) if cfg.cluster.node_groups else f"{RUNTIME_PREFIX}<name>"
        raise JobConfigError(
            "job.runtime",
            f"{runtime!r} is not one of trainstack's ClusterTrainingRuntimes; allowed: {allowed}",
        )


def check_secrets_approved(cfg: Any) -> None:
    """With `cluster.approved_secrets` set, a job mounts only those Secrets: any other one in
    the namespace (the API's token hashes, another team's keys) stays out of its pods."""
    approved = cfg.cluster.approved_secrets
    if approved is None:
        return
    for key, ref in cfg.job.secrets.items():
        if ref.name is not None and ref.name not in approved:
            raise JobConfigError(
                f"job.secrets.{key}.name",
                f"Secret {ref.name!r} is not approved for jobs; allowed: the Secrets listed in "
                "cluster.approved_secrets",
            )


def check_priority_approved(cfg: Any) -> None:
    """With `cluster.approved_priorities` set, a job names only those priority classes: a
    higher one would let it preempt other teams' admitted jobs."""
    approved = cfg.cluster.approved_priorities
    priority = cfg.job.priority
    if approved is None or priority is None or priority in approved:
        return
    allowed = ", ".join(approved) if approved else "none (leave job.priority unset)"
    raise JobConfigError(
        "job.priority", f"{priority!r} is not approved for jobs; allowed: {allowed}"
    )


def check_cluster_names(cfg: Any) -> None:
    """The API server would refuse these only at submit time, after the ConfigMap."""
    cluster = cfg.cluster
    for key, value, problem_of in (
        ("cluster.namespace", cluster.namespace, dns1123_label_problem),
        ("cluster.service_account", cluster.service_account, dns1123_subdomain_problem),
        (
            "cluster.data_prepare_service_account",
            cluster.data_prepare_service_account,
            dns1123_subdomain_problem,
        ),
    ):
        problem = problem_of(value)
        if problem:
            raise JobConfigError(key, f"{value!r} is not allowed; allowed: {problem}")


KIND_CONFIG_CHECKS = {RAYJOB.api: check_rayjob_config}
"""A job kind whose config is checked by rules of its own instead of the TrainJob and
PyTorchJob ones above (keyed by `job.api`, as RENDERERS and JOB_CHECKS are)."""
