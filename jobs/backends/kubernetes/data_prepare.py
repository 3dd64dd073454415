"""`data prepare` as a Kubernetes Indexed Job: a pure function of the request and names.

One `batch/v1` Job, `completionMode: Indexed`, one index per slice of the sources: each pod runs
`python -m trainer.data.prepare` with its `JOB_COMPLETION_INDEX` (the same code as a prepare on
this machine), writes its slice's shards and marker, and the last slice to land writes the
manifest (see trainer/data/prepare/run.py: no second Job and no controller has to wait for
the others, and a retried index commits as well). `backoffLimitPerIndex` retries a failed index
alone; bad input (exit 2) fails its index at once through `podFailurePolicy` instead of being
retried. Pods go to CPU nodes: no GPU request, no GPU toleration (GPU nodes carry the
`nvidia.com/gpu` NoSchedule taint), and a node affinity that keeps them off every GPU
instance type of the catalog. S3 access is the service account's (EKS Pod Identity).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from catalog import INSTANCE_TYPES
from jobs.backends.kubernetes.manifest_checks import (
    ManifestError,
    check_restricted_pod,
    check_schema,
)
from jobs.backends.kubernetes.manifests import drop_none
from jobs.backends.kubernetes.pod_parts import (
    INSTANCE_TYPE_LABEL,
    scratch_volume,
    security_contexts,
)
from jobs.naming import run_id_problem

CONTAINER_NAME = "prepare"
COMPONENT_LABEL = "trainstack.io/component"
COMPONENT = "data-prepare"
EXIT_BAD_INPUT = 2


@dataclass(frozen=True)
class PrepareJobSpec:
    name: str
    namespace: str
    image: str
    service_account: str
    data: dict[str, Any]
    """The data.* section (the trainer's DataConfig fields), passed to each pod as JSON."""
    to: str
    slices: int
    parallelism: int
    retries_per_index: int
    cpus: int
    """CPU per pod: also the number of tokenizing processes it runs."""
    memory: str
    chunk_mb: float
    region: str
    kubernetes_version: str
    ttl_seconds_after_finished: int = 7 * 24 * 3600


def job_name(data: dict[str, Any], to: str, slices: int) -> str:
    """Same request, same name: submitting it twice finds the first Job (409), never a twin."""
    digest = hashlib.sha256(json.dumps([data, to, slices], sort_keys=True).encode()).hexdigest()
    return f"data-prepare-{digest[:10]}"


def command(spec: PrepareJobSpec) -> list[str]:
    return [
        "python",
        "-m",
        "trainer.data.prepare",
        "--to",
        spec.to,
        "--data",
        json.dumps(spec.data, sort_keys=True),
        "--slices",
        str(spec.slices),
        "--workers",
        str(spec.cpus),
        "--chunk-mb",
        str(spec.chunk_mb),
    ]


def indexed_job(spec: PrepareJobSpec) -> dict:
    """The Indexed Job as the plain dict the API takes (like jobs/backends/kubernetes/manifests.py:
    no client models, so rendering needs no Kubernetes client)."""
    pod_security, container_security = security_contexts()
    scratch, scratch_mount, scratch_env = scratch_volume()
    amounts = {"cpu": str(spec.cpus), "memory": spec.memory}
    container = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command(spec),
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "AWS_REGION", "value": spec.region},
            *scratch_env,
        ],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "securityContext": container_security,
        "volumeMounts": [scratch_mount],
    }
    off_gpu_nodes = {
        "matchExpressions": [
            {"key": INSTANCE_TYPE_LABEL, "operator": "NotIn", "values": sorted(INSTANCE_TYPES)}
        ]
    }
    pod = {
        "automountServiceAccountToken": False,
        "containers": [container],
        "restartPolicy": "Never",  # the Job retries (per index); podFailurePolicy needs Never
        "serviceAccountName": spec.service_account,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [off_gpu_nodes]
                }
            }
        },
        "securityContext": pod_security,
        "volumes": [scratch],
    }
    labels = {"app.kubernetes.io/managed-by": "trainstack", COMPONENT_LABEL: COMPONENT}
    failure_policy = {
        "rules": [
            {
                "action": "FailIndex",
                "onExitCodes": {
                    "containerName": CONTAINER_NAME,
                    "operator": "In",
                    "values": [EXIT_BAD_INPUT],
                },
            }
        ]
    }
    job_spec = {
        "completionMode": "Indexed",
        "completions": spec.slices,
        "parallelism": min(spec.parallelism, spec.slices),
        "backoffLimitPerIndex": spec.retries_per_index,
        "podFailurePolicy": failure_policy,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
    }
    return drop_none(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": spec.name,
                "namespace": spec.namespace,
                "labels": labels,
                "annotations": {"trainstack.io/data-prepared-to": spec.to},
            },
            "spec": job_spec,
        }
    )


def to_manifests(spec: PrepareJobSpec) -> list[dict]:
    """[the Indexed Job] as a plain dict, checked like the PyTorchJob manifests."""
    problem = run_id_problem(spec.name)
    if problem:
        raise ManifestError(f"Job {spec.name}: metadata.name: {problem}")
    job = indexed_job(spec)
    check_schema(job, spec.kubernetes_version, f"Job {spec.name}")
    check_restricted_pod(job["spec"]["template"], f"Job {spec.name} template")
    return [job]
