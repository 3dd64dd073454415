"""Job spec and its cluster side (kubernetes_job.py) -> the pieces of a run's Kubernetes
objects: the `kubeflow.org/v1` PyTorchJob, the ConfigMap holding the trainer's config, and the
parts both job kinds share (container env and volumes, the model initializer; what runtimes
share too is in pod_parts.py), as the plain dicts the API server takes (the fields of the
official client models, camelCase, unset ones left out). The TrainJob is
jobs/backends/kubernetes/trainjob.py; jobs/backends/kubernetes/job_kinds.py puts a run's
objects together and checks them.

Pure: the same spec and cluster side always gives the same dicts (golden tests pin them).
"""

from __future__ import annotations

from typing import Any

import yaml

from contract.run_dir import POD_NAME_ENV, SUBMISSION_ENV
from jobs.backends.kubernetes.kubernetes_job import KubernetesJob
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
from jobs.runners import runner_named
from jobs.runners.program import SCRATCH_DIR as RUNNER_DIR
from jobs.runners.program import start_counter
from jobs.spec import CONFIG_FILE, CONFIG_MOUNT_DIR, LABEL_PREFIX, JobSpec

CONTAINER_NAME = "pytorch"
"""The operator finds the trainer container by this name."""
RESTART_POLICY = "ExitCode"
"""Retry exit codes 128-255 (SIGTERM preemption: the trainer resumes), fail on 1-127."""


def config_map_name(run_id: str) -> str:
    return f"{run_id}-config"


_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's emitter when PyYAML has it (every wheel does): a sweep writes thousands of
manifests, and the pure-Python emitter was a fifth of a render point's time."""


def trainer_config_yaml(spec: JobSpec) -> str:
    return yaml.dump(spec.trainer_config, Dumper=_SafeDumper, sort_keys=False)


def drop_none(value: Any) -> Any:
    """What the API server receives: unset (None) fields left out, as the client's serializer
    did."""
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_none(v) for v in value]
    return value


def container_env(spec: JobSpec, leave_out: tuple[str, ...] = ()) -> list[dict]:
    """The job's environment (values, then secrets by reference), less `leave_out`."""
    env = [{"name": k, "value": v} for k, v in spec.env.items() if k not in leave_out]
    for ref in spec.secret_env:
        selector = {"key": ref.key, "name": ref.secret}
        env.append({"name": ref.env, "valueFrom": {"secretKeyRef": selector}})
    return env


CONFIG_VOLUME = "trainer-config"
CONFIG_MOUNT = {"mountPath": CONFIG_MOUNT_DIR, "name": CONFIG_VOLUME, "readOnly": True}


def config_volume(run_id: str) -> dict:
    """The run's trainer config (its ConfigMap) as a volume."""
    return {
        "configMap": {
            "items": [{"key": CONFIG_FILE, "path": CONFIG_FILE}],
            "name": config_map_name(run_id),
        },
        "name": CONFIG_VOLUME,
    }


def job_volumes(spec: JobSpec, kube: KubernetesJob) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) of this job's own beyond the config: the runner's scratch for another
    runner than the built-in trainer, the stack's FSx claim with `storage.fsx`."""
    volumes, mounts = [], []
    if not runner_named(spec.runner).builtin:
        # The workdir is unpacked, and an s3:// run's metrics and runner=command checkpoints
        # kept, here (trainer.runner_exec).
        volumes.append({"emptyDir": {}, "name": "runner"})
        mounts.append({"mountPath": RUNNER_DIR, "name": "runner"})
    if kube.fsx:
        claim, mount_path = kube.fsx
        volumes.append({"name": "fsx", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"mountPath": mount_path, "name": "fsx"})
    return volumes, mounts


def capacity_selector(kube: KubernetesJob) -> dict:
    """`compute.capacity`'s node selector term (none for `any`)."""
    return {CAPACITY_TYPE_LABEL: kube.capacity_type} if kube.capacity_type else {}


MODEL_INITIALIZER_WAIT_S = 6 * 3600
"""How long a pod that does not download waits for the model cache (large models, slow links)."""


def model_initializer(spec: JobSpec, wait: bool, security: dict) -> dict:
    """The init container putting a Hub model into the run storage cache (once: it skips a
    complete cache); with `wait` it only waits for another pod to finish it."""
    source, cache = spec.model_cache  # type: ignore[misc]
    command = ["python", "-m", "trainer.hf.hub_cache", source, cache]
    if wait:
        command += ["--wait", str(MODEL_INITIALIZER_WAIT_S)]
    return {
        "command": command,
        "env": container_env(spec),
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "name": "model-initializer",
        "resources": {
            "limits": {"cpu": "2", "memory": "4Gi"},
            "requests": {"cpu": "1", "memory": "2Gi"},
        },
        "securityContext": dict(security),
    }


def pod_template(spec: JobSpec, kube: KubernetesJob, wait_for_model: bool = False) -> dict:
    """The pod template of every replica, as the plain dict the API takes (no client models:
    importing the Kubernetes client costs half a second that rendering does not need)."""
    pod_security, container_security = security_contexts()
    scratch, scratch_mount, scratch_env = scratch_volume()
    container = {
        "command": list(spec.command),
        "env": container_env(spec) + scratch_env,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "name": CONTAINER_NAME,
        "resources": container_resources(spec.resources),
        "securityContext": container_security,
        "volumeMounts": [CONFIG_MOUNT, SHM_MOUNT, scratch_mount],
    }
    volumes, mounts = job_volumes(spec, kube)
    container["volumeMounts"] += mounts
    pod = {
        # The trainer never calls the Kubernetes API; AWS comes through Pod Identity's own token.
        "automountServiceAccountToken": False,
        "containers": [container],
        "nodeSelector": {INSTANCE_TYPE_LABEL: spec.instance_type} | capacity_selector(kube),
        "securityContext": pod_security,
        "serviceAccountName": kube.service_account,
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "tolerations": [GPU_TOLERATION],
        "volumes": [
            config_volume(spec.name),
            shm_volume(spec.resources.shm_size),
            scratch,
            *volumes,
        ],
    }
    if spec.model_cache is not None:
        pod["initContainers"] = [model_initializer(spec, wait_for_model, container_security)]
    return {"metadata": pod_metadata(spec), "spec": pod}


def pod_metadata(spec: JobSpec) -> dict:
    """The job's labels and annotations for its pods, less Kueue's: Kueue admits the job,
    never its pods one by one."""
    labels = {k: v for k, v in spec.labels.items() if not k.startswith("kueue.x-k8s.io/")}
    return {"annotations": dict(spec.annotations), "labels": labels}


def _metadata(spec: JobSpec, kube: KubernetesJob, name: str) -> dict:
    return {
        "annotations": dict(spec.annotations),
        "labels": dict(spec.labels),
        "name": name,
        "namespace": kube.namespace,
    }


CREATED_AT = f"{LABEL_PREFIX}/created-at"
"""When the job was submitted (jobs.backends.kubernetes.submitting.stamped; renders carry
none)."""


def counting_starts(template: dict, max_restarts: int) -> dict:
    """A PyTorchJob's pod template whose container counts its starts first (`start_counter`),
    keyed by the pod's name (stable across the operator's recreations) and the submission."""
    container = template["spec"]["containers"][0]
    container["command"] = [*start_counter(max_restarts), *container["command"]]
    name = {"fieldRef": {"fieldPath": "metadata.name"}}
    container["env"].append({"name": POD_NAME_ENV, "valueFrom": name})
    # The submission, which the backend stamps on the pod templates at submit: a new one resets.
    submission = {"fieldRef": {"fieldPath": f"metadata.annotations['{CREATED_AT}']"}}
    container["env"].append({"name": SUBMISSION_ENV, "valueFrom": submission})
    return template


def pytorch_job(spec: JobSpec, kube: KubernetesJob) -> dict:
    restarts = kube.run_policy.backoff_limit
    template = counting_starts(pod_template(spec, kube), restarts)
    # The master fills the model cache; workers wait for it (all fill it without a master).
    worker_template = counting_starts(
        pod_template(spec, kube, wait_for_model=bool(kube.master_replicas)), restarts
    )
    replicas = {}
    if kube.master_replicas:
        replicas["Master"] = {
            "replicas": kube.master_replicas,
            "restartPolicy": RESTART_POLICY,
            "template": template,
        }
    if kube.worker_replicas:
        replicas["Worker"] = {
            "replicas": kube.worker_replicas,
            "restartPolicy": RESTART_POLICY,
            "template": worker_template,
        }
    elastic = None
    if spec.elastic:
        elastic = {
            "maxReplicas": spec.elastic.max_nodes,
            "maxRestarts": kube.run_policy.backoff_limit,  # job.max_restarts, as torchrun's
            "minReplicas": spec.elastic.min_nodes,
            "rdzvBackend": "c10d",
        }
    policy = kube.run_policy
    run_policy = {
        "activeDeadlineSeconds": policy.active_deadline_seconds,
        "backoffLimit": policy.backoff_limit,
        "cleanPodPolicy": policy.clean_pod_policy,
        "suspend": True if policy.suspend else None,
        "ttlSecondsAfterFinished": policy.ttl_seconds_after_finished,
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _metadata(spec, kube, spec.name),
        "spec": {
            "elasticPolicy": elastic,
            "nprocPerNode": str(spec.nproc_per_node),
            "pytorchReplicaSpecs": replicas,
            "runPolicy": run_policy,
        },
    }


def config_map(spec: JobSpec, kube: KubernetesJob) -> dict:
    return {
        "apiVersion": "v1",
        "data": {CONFIG_FILE: trainer_config_yaml(spec)},
        "kind": "ConfigMap",
        "metadata": _metadata(spec, kube, config_map_name(spec.name)),
    }


class _BlockDumper(_SafeDumper):  # type: ignore[misc, valid-type]
    """Multi-line strings (the trainer config in the ConfigMap) as readable `|` blocks."""


def _represent_str(dumper: Any, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockDumper.add_representer(str, _represent_str)


def to_yaml(manifests: list[dict]) -> str:
    """Multi-document YAML that `kubectl apply -f` takes."""
    return yaml.dump_all(manifests, Dumper=_BlockDumper, sort_keys=False)
