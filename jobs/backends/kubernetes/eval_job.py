"""`trainstack eval RUN backend=kubernetes`: one checkpoint scored by a `batch/v1` Job on one GPU
of a GPU node, a pure function of the request and names (rendered like data_prepare.py).

The pod runs `python -m trainer.evaluation.job` in the trainer image's `hf-` variant (the
same `evaluate_run` as `trainstack eval` here: the checkpoint exported to the pod's scratch,
lm-eval's `hf` model on the GPU), reading the run dir on S3 and writing lm-eval's results
JSON and samples to `<run_dir>/eval/step-N/`, where `status`, `runs`, the Training API and the
dashboard read them. It runs as the run's service account (S3 through EKS Pod Identity), with
the run-id label (the run's NetworkPolicy: only this run's pods may connect to it), under the
`restricted` security contexts, within activeDeadlineSeconds.

Kueue: the Job carries the stack's LocalQueue label (`job.queue`), so it is its own Workload,
created suspended and admitted against the same ClusterQueue quota as training: it starts only
on GPUs no admitted job holds. It carries no priority class, so its priority is Kueue's 0,
never above a training job's (the stack's classes are 10..1000, or 0 without one) and the
ClusterQueue's `withinClusterQueue: LowerPriority` never lets it preempt one, while a
training job of any class may preempt it. One flavor and queue for both keeps the GPUs'
accounting in one place (a second queue would need its own share of the quota).

Same run and step, same name: submitting it twice finds the first Job (AlreadyExists), never
a twin, which is what makes `eval.every_checkpoint`'s scheduling idempotent.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from catalog import INSTANCE_TYPES, get_instance_type
from catalog.kubernetes import QUEUE_LABEL
from catalog.pods import Resources, pod_resources
from jobs.backends.kubernetes.manifest_checks import (
    ManifestError,
    check_restricted_pod,
    check_schema,
)
from jobs.backends.kubernetes.manifests import drop_none
from jobs.backends.kubernetes.network_policy import RUN_ID_LABEL
from jobs.backends.kubernetes.pod_parts import (
    CAPACITY_TYPE_LABEL,
    GPU_TOLERATION,
    INSTANCE_TYPE_LABEL,
    SHM_MOUNT,
    container_resources,
    scratch_volume,
    security_contexts,
    shm_volume,
)
from jobs.naming import DNS1035, DNS_LABEL_MAX
from jobs.schema import CAPACITY_TYPES
from jobs.spec import LABEL_PREFIX
from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig

CONTAINER_NAME = "eval"
COMPONENT_LABEL = f"{LABEL_PREFIX}/component"
COMPONENT = "eval"
EVAL_OF_LABEL = f"{LABEL_PREFIX}/eval-of"
"""The run a Job scores (its pods carry the run-id label instead: the NetworkPolicy's)."""
STEP_LABEL = f"{LABEL_PREFIX}/eval-step"
EXIT_BAD_INPUT = 2
MAX_NAME = DNS_LABEL_MAX
"""A Job's name is its pods' `job-name` label value: a DNS label at most."""
DEFAULT_DEADLINE_S = 6 * 3600
"""activeDeadlineSeconds without `job.active_deadline_seconds`: an export plus lm-eval on one
GPU takes minutes to an hour; a hung one must still give its GPU back."""
RETRIES = 1
"""backoffLimit: one retry (a lost node, a spot reclaim); bad input (exit 2) fails at once."""


@dataclass(frozen=True)
class EvalJobSpec:
    run_id: str
    run_dir: str
    """s3:// URI of the run dir the pod reads the checkpoint from and writes results to."""
    step: int
    namespace: str
    image: str
    service_account: str
    settings: dict[str, Any]
    """trainer.evaluation.config.EvalConfig's fields, passed to the pod as JSON."""
    instance_type: str
    resources: Resources
    kubernetes_version: str
    queue: str | None = None
    capacity_type: str | None = None
    region: str = "us-east-1"
    active_deadline_seconds: int = DEFAULT_DEADLINE_S
    ttl_seconds_after_finished: int = 7 * 24 * 3600

    @property
    def name(self) -> str:
        return job_name(self.run_id, self.step)

    def at(self, step: int) -> EvalJobSpec:
        """The same evaluation of another checkpoint."""
        return replace(self, step=step)


def job_name(run_id: str, step: int) -> str:
    """`<run id>-eval-<step>`; a run id too long for that is cut and a digest of it added, so
    two runs never share an eval Job's name."""
    suffix = f"-eval-{step}"
    name = f"{run_id}{suffix}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    keep = MAX_NAME - len(suffix) - len(digest) - 1
    return f"{run_id[:keep].rstrip('-')}-{digest}{suffix}"


def eval_selector(run_id: str) -> str:
    """The label selector of a run's eval Jobs."""
    return f"{COMPONENT_LABEL}={COMPONENT},{EVAL_OF_LABEL}={run_id}"


def command(spec: EvalJobSpec) -> list[str]:
    return [
        "python",
        "-m",
        "trainer.evaluation.job",
        "--run-dir",
        spec.run_dir,
        "--step",
        str(spec.step),
        "--settings",
        json.dumps(spec.settings, sort_keys=True),
    ]


def eval_job(spec: EvalJobSpec) -> dict:
    """The Job as the plain dict the API takes."""
    pod_security, container_security = security_contexts()
    scratch, scratch_mount, scratch_env = scratch_volume()
    container = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command(spec),
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "AWS_REGION", "value": spec.region},
            {"name": "TRAINSTACK_RUN_ID", "value": spec.run_id},
            {"name": "TRAINSTACK_RUN_DIR", "value": spec.run_dir},
            *scratch_env,
        ],
        "resources": container_resources(spec.resources),
        "securityContext": container_security,
        "volumeMounts": [SHM_MOUNT, scratch_mount],
    }
    selector = {INSTANCE_TYPE_LABEL: spec.instance_type}
    if spec.capacity_type:
        selector[CAPACITY_TYPE_LABEL] = spec.capacity_type
    pod = {
        "automountServiceAccountToken": False,
        "containers": [container],
        "restartPolicy": "Never",  # the Job retries; podFailurePolicy needs Never
        "serviceAccountName": spec.service_account,
        "nodeSelector": selector,
        "tolerations": [GPU_TOLERATION],
        "securityContext": pod_security,
        "volumes": [shm_volume(spec.resources.shm_size), scratch],
    }
    labels = {
        "app.kubernetes.io/managed-by": "trainstack",
        COMPONENT_LABEL: COMPONENT,
        EVAL_OF_LABEL: spec.run_id,
        STEP_LABEL: str(spec.step),
    }
    job_labels = dict(labels) | ({QUEUE_LABEL: spec.queue} if spec.queue else {})
    pod_labels = dict(labels) | {RUN_ID_LABEL: spec.run_id}
    failure_policy = {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER_NAME,
                    "operator": "In",
                    "values": [EXIT_BAD_INPUT],
                },
            }
        ]
    }
    job_spec = {
        "backoffLimit": RETRIES,
        "activeDeadlineSeconds": spec.active_deadline_seconds,
        "podFailurePolicy": failure_policy,
        # Queued: created suspended, and only Kueue un-suspends it, on admission.
        "suspend": True if spec.queue else None,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "template": {"metadata": {"labels": pod_labels}, "spec": pod},
    }
    return drop_none(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": spec.name,
                "namespace": spec.namespace,
                "labels": job_labels,
                "annotations": {f"{LABEL_PREFIX}/run-dir": spec.run_dir},
            },
            "spec": job_spec,
        }
    )


def to_manifests(spec: EvalJobSpec) -> list[dict]:
    """[the Job] as a plain dict, checked like the other manifests."""
    if not DNS1035.match(spec.name):
        raise ManifestError(f"Job {spec.name}: metadata.name: not DNS-1035")
    job = eval_job(spec)
    check_schema(job, spec.kubernetes_version, f"Job {spec.name}")
    check_restricted_pod(job["spec"]["template"], f"Job {spec.name} template")
    return [job]


def gpu_instance(cfg: Any) -> str:
    instance_type = cfg.compute.instance_type
    if instance_type is None or instance_type not in INSTANCE_TYPES:
        gpus = ", ".join(sorted(INSTANCE_TYPES)[:4])
        raise ConfigError(
            f"compute: {cfg.compute.name!r} has no GPU; the eval job runs on one GPU of a GPU "
            f"node; allowed: compute=<instance type> ({gpus}, ...)"
        )
    return str(instance_type)


def eval_template(
    cfg: Any, run_id: str, run_dir: str, settings: EvalConfig, image: str
) -> EvalJobSpec:
    """The eval Job of `run_id`'s step 0; `.at(step)` for each checkpoint."""
    instance = get_instance_type(gpu_instance(cfg))
    resources = replace(pod_resources(instance, 1), efa=0, hugepages_2mi=None)
    return EvalJobSpec(
        run_id=run_id,
        run_dir=run_dir,
        step=0,
        namespace=cfg.cluster.namespace,
        image=image,
        service_account=cfg.cluster.service_account,
        settings=asdict(settings),
        instance_type=instance.name,
        resources=resources,
        kubernetes_version=str(cfg.cluster.kubernetes_version),
        queue=cfg.job.queue or None,
        capacity_type=CAPACITY_TYPES[cfg.compute.capacity],
        region=cfg.cluster.region,
        active_deadline_seconds=cfg.job.active_deadline_seconds or DEFAULT_DEADLINE_S,
        ttl_seconds_after_finished=cfg.job.ttl_seconds_after_finished,
    )
