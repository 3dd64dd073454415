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
from jobs.manifest_checks import ManifestError, check_restricted_pod, check_schema
from jobs.manifests import INSTANCE_TYPE_LABEL, _serializer, security_contexts
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


def indexed_job(spec: PrepareJobSpec) -> Any:
    from kubernetes import client as k8s

    pod_security, container_security = security_contexts(k8s)
    amounts = {"cpu": str(spec.cpus), "memory": spec.memory}
    container = k8s.V1Container(
        name=CONTAINER_NAME,
        image=spec.image,
        image_pull_policy="IfNotPresent",
        command=command(spec),
        env=[
            k8s.V1EnvVar(name="PYTHONUNBUFFERED", value="1"),
            k8s.V1EnvVar(name="AWS_REGION", value=spec.region),
        ],
        resources=k8s.V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts)),
        security_context=container_security,
    )
    off_gpu_nodes = k8s.V1NodeSelectorTerm(
        match_expressions=[
            k8s.V1NodeSelectorRequirement(
                key=INSTANCE_TYPE_LABEL, operator="NotIn", values=sorted(INSTANCE_TYPES)
            )
        ]
    )
    pod = k8s.V1PodSpec(
        containers=[container],
        restart_policy="Never",  # the Job retries (per index); podFailurePolicy needs Never
        service_account_name=spec.service_account,
        node_selector={"kubernetes.io/os": "linux"},
        affinity=k8s.V1Affinity(
            node_affinity=k8s.V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                    node_selector_terms=[off_gpu_nodes]
                )
            )
        ),
        security_context=pod_security,
    )
    labels = {"app.kubernetes.io/managed-by": "trainstack", COMPONENT_LABEL: COMPONENT}
    failure_policy = k8s.V1PodFailurePolicy(
        rules=[
            k8s.V1PodFailurePolicyRule(
                action="FailIndex",
                on_exit_codes=k8s.V1PodFailurePolicyOnExitCodesRequirement(
                    container_name=CONTAINER_NAME, operator="In", values=[EXIT_BAD_INPUT]
                ),
            )
        ]
    )
    return k8s.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=k8s.V1ObjectMeta(
            name=spec.name,
            namespace=spec.namespace,
            labels=labels,
            annotations={"trainstack.io/data-prepared-to": spec.to},
        ),
        spec=k8s.V1JobSpec(
            completion_mode="Indexed",
            completions=spec.slices,
            parallelism=min(spec.parallelism, spec.slices),
            backoff_limit_per_index=spec.retries_per_index,
            pod_failure_policy=failure_policy,
            ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
            template=k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels=labels), spec=pod),
        ),
    )


def to_manifests(spec: PrepareJobSpec) -> list[dict]:
    """[the Indexed Job] as a plain dict, checked like the PyTorchJob manifests."""
    problem = run_id_problem(spec.name)
    if problem:
        raise ManifestError(f"Job {spec.name}: metadata.name: {problem}")
    job = _serializer().sanitize_for_serialization(indexed_job(spec))
    check_schema(job, spec.kubernetes_version, f"Job {spec.name}")
    check_restricted_pod(job["spec"]["template"], f"Job {spec.name} template")
    return [job]
