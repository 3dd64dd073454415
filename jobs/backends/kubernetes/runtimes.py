"""trainstack's Kubeflow Trainer runtimes: one `ClusterTrainingRuntime` per GPU node group and
a CPU one, built from the instance catalog. Pure; `infra/` installs what this returns (so the
stack and the tests read one definition), and TrainJobs name them
(jobs/backends/kubernetes/trainjob.py).

A runtime carries what every job on its node group needs and no job should repeat: where the
pods go (the group's node selector, the GPU taint's toleration), the node's EFA interfaces and
2 MiB huge pages and its share of CPU and memory as default resources, a memory-backed
/dev/shm, the `restricted` security contexts with a read-only root filesystem and the scratch
emptyDir at /tmp that HOME and TMPDIR point into (the PyTorchJob pods' own: both
from jobs/backends/kubernetes/pod_parts.py),
no service account token, NCCL/EFA environment, and the failure policy:

- exit 1-127 (bad input, a bug) fails the node's Job through its pod failure policy, and the
  JobSet fails at once (no restart can fix it);
- anything else (128-255: preempted, killed, a peer lost; or a lost node) fails the Job and the
  JobSet recreates all nodes, up to `max_restarts` times; the trainer resumes from its last
  checkpoint. Within a pod, torchrun restarts the node's ranks first (`job.max_restarts`).
"""

from __future__ import annotations

from catalog import InstanceType
from catalog.pods import platform_env, pod_resources
from jobs.backends.kubernetes.client.kinds import TRAINJOB
from jobs.backends.kubernetes.pod_facts import (
    CPU_RUNTIME,
    RUNTIME_LABELS,
    default_group_name,
    gpu_runtime_name,
)
from jobs.backends.kubernetes.pod_parts import (
    GPU_TOLERATION,
    INSTANCE_TYPE_LABEL,
    SHM_MOUNT,
    container_resources,
    scratch_volume,
    security_contexts,
    shm_volume,
)

API_VERSION = TRAINJOB.api_version
RUNTIME_KIND = "ClusterTrainingRuntime"
NODE = TRAINJOB.container
"""The torch runtime's replicated job and trainer container: Trainer injects PET_* there."""

NODE_GROUP_LABEL = "trainstack.io/node-group"
"""The label every node of a trainstack GPU node group carries (infra/gpu_nodes.py)."""
DEFAULT_MAX_RESTARTS = 3
"""JobSet recreations after a node failed with a retryable code (job.max_restarts' default)."""
RUNTIME_GRACE_S = 600
"""SIGTERM to SIGKILL of a queued TrainJob's pods, and the most such a job may ask for
(job.termination_grace_period_seconds, jobs/backends/kubernetes/checks.py): Kueue rewrites a
queued TrainJob with Trainer types whose pod patch has no grace period
(jobs/backends/kubernetes/trainjob.py), so the runtime's applies. It is a bound: the trainer
exits as soon as its SIGTERM checkpoint is written. A TrainJob outside Kueue patches its own."""
PERMANENT_EXIT_CODES = list(range(1, 128))
"""Exit codes no restart fixes: the trainer's 2 (bad input), 1 (a bug), anything below 128."""
FAILURE_RULE_NAME = "PermanentExitCode"
"""The JobSet failure-policy rule that fails the JobSet on a permanent exit code. JobSet's
webhook allows letters, digits, '_', ',' and ':' only
(jobs/backends/kubernetes/manifest_checks.py)."""
CPU_RESOURCES = {"cpu": "2", "memory": "8Gi"}
"""The CPU runtime's default per node; a TrainJob sets its own in `resourcesPerNode`."""


def _env(values: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _runtime(
    name: str,
    labels: dict[str, str],
    pod: dict,
    container: dict,
    *,
    max_restarts: int,
) -> dict:
    pod_security, container_security = security_contexts()
    scratch, scratch_mount, scratch_env = scratch_volume()
    node = {
        "name": NODE,
        "securityContext": container_security,
        "volumeMounts": [dict(SHM_MOUNT), scratch_mount],
        **container,
        "env": container.get("env", []) + scratch_env,
    }
    pod_spec = {
        # The trainer never calls the Kubernetes API; S3 credentials come from Pod Identity's
        # own projected token, not the service account token (checkov CKV_K8S_38).
        "automountServiceAccountToken": False,
        "containers": [node],
        "restartPolicy": "Never",  # the Job's pod failure policy needs it; JobSet restarts
        "securityContext": pod_security,
        **pod,
        "volumes": [*pod["volumes"], scratch],
    }
    job = {
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": NODE,
                        "operator": "In",
                        "values": PERMANENT_EXIT_CODES,
                    },
                }
            ]
        },
        "template": {"spec": pod_spec},
    }
    jobset = {
        "failurePolicy": {
            "maxRestarts": max_restarts,
            "rules": [
                {
                    "action": "FailJobSet",
                    "name": FAILURE_RULE_NAME,
                    "onJobFailureReasons": ["PodFailurePolicy"],
                }
            ],
        },
        "replicatedJobs": [
            {
                "name": NODE,
                "replicas": 1,
                "template": {
                    # Trainer finds the trainer's pods by this ancestor label.
                    "metadata": {
                        "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                    },
                    "spec": job,
                },
            }
        ],
        # No `ttlSecondsAfterFinished`: Trainer clears a TrainJob's Failed condition (unless
        # its deadline passed) on every reconcile and applies its JobSet again, recreating a
        # missing one (kubeflow/trainer v2.3.0, pkg/controller/trainjob_controller.go:
        # `removeFailedCondition`, then `reconcileObjects` while not finished). A failed
        # JobSet deleted by a TTL would so start the training again. The JobSet stays while
        # its TrainJob does; trainstack deletes finished TrainJobs
        # (jobs.backends.kubernetes.client.state.expired).
    }
    return {
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": {"labels": {**RUNTIME_LABELS, **labels}, "name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": jobset},
        },
    }


def gpu_runtime(
    group: str,
    instance: InstanceType,
    *,
    service_account: str = "trainer",
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    name: str | None = None,
) -> dict:
    """The runtime of GPU node group `group` of `instance` nodes: one pod per node, all of it
    (GPUs, EFA interfaces, huge pages, CPU and memory less the node's daemons) by default.
    Named `trainstack-<group>` unless `name` is given."""
    whole = pod_resources(instance, instance.gpus)
    pod = {
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance.name, NODE_GROUP_LABEL: group},
        "serviceAccountName": service_account,
        "terminationGracePeriodSeconds": RUNTIME_GRACE_S,
        "tolerations": [dict(GPU_TOLERATION)],
        "volumes": [shm_volume(whole.shm_size)],
    }
    container = {"env": _env(platform_env(instance)), "resources": container_resources(whole)}
    return _runtime(
        name or gpu_runtime_name(group),
        {NODE_GROUP_LABEL: group},
        pod,
        container,
        max_restarts=max_restarts,
    )


def cpu_runtime(
    *,
    service_account: str = "trainer",
    max_restarts: int = DEFAULT_MAX_RESTARTS,
) -> dict:
    """The CPU runtime (gloo; the system nodes): no GPU, EFA or taint to tolerate."""
    pod = {
        "serviceAccountName": service_account,
        "terminationGracePeriodSeconds": RUNTIME_GRACE_S,
        "volumes": [shm_volume("1Gi")],
    }
    resources = {"limits": dict(CPU_RESOURCES), "requests": dict(CPU_RESOURCES)}
    return _runtime(
        CPU_RUNTIME,
        {},
        pod,
        {"resources": resources},
        max_restarts=max_restarts,
    )


def cluster_training_runtimes(
    groups: list[tuple[str, InstanceType]], *, service_account: str = "trainer"
) -> list[dict]:
    """Every runtime a stack installs: one per GPU node group (name, instance); then, for each
    instance type, the runtime a job rendered without a stack names (`trainstack-<instance
    type>`, jobs.backends.kubernetes.kubernetes_job.runtime_for), on the type's first group,
    unless a group has that name already; then CPU. So a render's runtime is installed by every
    stack with its instance type (the shipped prod stack's group `p5` also gets
    `trainstack-p5-48xlarge`)."""
    runtimes = [gpu_runtime(g, i, service_account=service_account) for g, i in groups]
    names = {runtime["metadata"]["name"] for runtime in runtimes}
    for group, instance in groups:
        stackless = gpu_runtime_name(default_group_name(instance.name))
        if stackless not in names:
            names.add(stackless)
            runtimes.append(
                gpu_runtime(group, instance, service_account=service_account, name=stackless)
            )
    return [*runtimes, cpu_runtime(service_account=service_account)]
