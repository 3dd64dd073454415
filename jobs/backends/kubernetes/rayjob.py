"""Job spec -> a KubeRay `RayJob` (ray.io/v1), the sibling of manifests.py's PyTorchJob and
trainjob.py's TrainJob: one Ray cluster per run, created for it and deleted when it ends.

- The head is its own CPU pod: it holds Ray's GCS, dashboard and the driver (the entrypoint,
  e.g. VERL's `main_ppo` controller), none of which needs a GPU. It starts with `num-gpus: 0`
  and does not tolerate the GPU taint, so it lands on the system nodes and every GPU node is
  an identical worker (a GPU node as head would lend VERL's placement groups a node with less
  room, and losing it would take the whole cluster down with it).
- One worker group, `workers`, of `compute.nodes` pods, each all of its node's share
  (compute's GPUs, EFA interfaces, huge pages: catalog.pods), on its instance type and
  capacity, tolerating the GPU taint; `minReplicas == maxReplicas == replicas` and no
  autoscaler: Kueue admits a fixed gang.
- The driver gets no entrypoint resources (`entrypointNumCpus/Gpus/Memory/Resources` unset):
  Ray then starts the driver's supervisor with RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES
  (ray-project/ray#24546, the fix of #24455, still in Ray 2.60's
  python/ray/dashboard/modules/job/job_manager.py `_get_supervisor_runtime_env`); any entrypoint
  resource turns that off and the driver sees only what it reserved (num_gpus 0: none). The
  GPUs stay the workers', where VERL's and Ray Train's placement groups ask for them.
- `submissionMode: K8sJobMode`: KubeRay runs `ray job submit` in a submitter Job (its default
  command; trainstack gives it only a restricted pod template), and Kueue admits head,
  workers and submitter as one Workload. `shutdownAfterJobFinishes: true` (Kueue refuses a
  RayJob without it), `backoffLimit` from `job.max_restarts` (each retry is a new Ray cluster;
  the program resumes from its newest committed checkpoint), `activeDeadlineSeconds`.
- Every pod carries the run's config mount, service account, labels (the run id the run's
  NetworkPolicy selects), the job contract's env and the restricted security contexts; the
  runtime env carries the NCCL/EFA variables to every Ray worker process.

Pure: the same spec and cluster side always give the same dict.
"""

from __future__ import annotations

import shlex

import yaml

from jobs.backends.kubernetes.client.kinds import RAYJOB
from jobs.backends.kubernetes.kubernetes_job import KubernetesJob
from jobs.backends.kubernetes.manifests import (
    CONFIG_MOUNT,
    capacity_selector,
    config_volume,
    container_env,
    job_volumes,
    pod_metadata,
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
from jobs.spec import JobSpec

HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
WORKER_GROUP = "workers"
HEAD_RESOURCES = {"cpu": "2", "memory": "8Gi"}
"""The head pod (GCS, dashboard, the driver; VERL's controller keeps the dataset and its
tokenizer in the driver), sized to fit a default system node (m6i.xlarge: 4 vCPU, 16 GiB)
beside the operators, and inside the `system` flavor's default quota (infra/kueue.py) with
its submitter."""
HEAD_SHM = "2Gi"
SUBMITTER_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
"""The `ray job submit` pod: it only follows the job's logs."""
SUBMISSION_MODE = "K8sJobMode"
DASHBOARD_PORT = 8265


def entrypoint(spec: JobSpec) -> str:
    """The driver's command line: runner_exec (run record, contract dirs) then the program."""
    return shlex.join(spec.command)


def runtime_env(spec: JobSpec, kube: KubernetesJob) -> dict:
    """Ray's runtime env for the job: the NCCL/EFA variables of the instance type, for every
    Ray worker process (the pods' env carries them too; a program's own runtime envs inherit
    the job's). Never CUDA_VISIBLE_DEVICES: Ray sets it per worker from its GPU requests."""
    env = {key: spec.env[key] for key in kube.platform_env if key in spec.env}
    return {"env_vars": env} if env else {}


def _container(spec: JobSpec, kube: KubernetesJob, name: str, resources: dict) -> dict:
    _, container_security = security_contexts()
    _, scratch_mount, scratch_env = scratch_volume()
    _, mounts = job_volumes(spec, kube)
    return {
        "env": container_env(spec) + scratch_env,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "name": name,
        # KubeRay writes the command (`ray start ...`); the ports are its defaults.
        "resources": resources,
        "securityContext": container_security,
        "volumeMounts": [dict(CONFIG_MOUNT), dict(SHM_MOUNT), scratch_mount, *mounts],
    }


def _pod(spec: JobSpec, kube: KubernetesJob, container: dict, shm: str, gpu: bool) -> dict:
    pod_security, _ = security_contexts()
    scratch, _, _ = scratch_volume()
    volumes, _ = job_volumes(spec, kube)
    # The GPU workers only: the head and the submitter go to the system nodes, whatever
    # capacity compute.capacity picks for the GPUs (a spot selector would strand them).
    selector = (capacity_selector(kube) | {INSTANCE_TYPE_LABEL: spec.instance_type}) if gpu else {}
    pod = {
        # Ray never calls the Kubernetes API (no autoscaler); AWS comes through Pod Identity.
        "automountServiceAccountToken": False,
        "containers": [container],
        "nodeSelector": selector or None,
        "securityContext": pod_security,
        "serviceAccountName": kube.service_account,
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "tolerations": [dict(GPU_TOLERATION)] if gpu else None,
        "volumes": [config_volume(spec.name), shm_volume(shm), scratch, *volumes],
    }
    return {"metadata": pod_metadata(spec), "spec": pod}


def head_group(spec: JobSpec, kube: KubernetesJob) -> dict:
    both = dict(HEAD_RESOURCES)
    container = _container(spec, kube, HEAD_CONTAINER, {"limits": both, "requests": dict(both)})
    return {
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
        "template": _pod(spec, kube, container, HEAD_SHM, gpu=False),
    }


def worker_group(spec: JobSpec, kube: KubernetesJob) -> dict:
    res = spec.resources
    if res is None:
        raise ValueError("a RayJob's workers need compute's resources (not local_cpu)")
    container = _container(spec, kube, WORKER_CONTAINER, container_resources(res))
    return {
        "groupName": WORKER_GROUP,
        "maxReplicas": spec.nodes,
        "minReplicas": spec.nodes,
        "rayStartParams": {"num-gpus": str(res.gpus)},
        "replicas": spec.nodes,
        "template": _pod(spec, kube, container, res.shm_size, gpu=True),
    }


def submitter_template(spec: JobSpec, kube: KubernetesJob) -> dict:
    """The submitter Job's pod: KubeRay fills in its `ray job submit` command (no command
    here), so only where it runs and the restricted contexts are trainstack's."""
    pod_security, container_security = security_contexts()
    scratch, scratch_mount, scratch_env = scratch_volume()
    both = dict(SUBMITTER_RESOURCES)
    container = {
        "env": scratch_env,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "name": RAYJOB.submitter_container,
        "resources": {"limits": both, "requests": dict(both)},
        "securityContext": container_security,
        "volumeMounts": [scratch_mount],
    }
    pod = {
        "automountServiceAccountToken": False,
        "containers": [container],
        "restartPolicy": "Never",
        "securityContext": pod_security,
        "serviceAccountName": kube.service_account,
        "volumes": [scratch],
    }
    return {"metadata": pod_metadata(spec), "spec": pod}


def ray_job(spec: JobSpec, kube: KubernetesJob) -> dict:
    env = runtime_env(spec, kube)
    policy = kube.run_policy
    return {
        "apiVersion": RAYJOB.api_version,
        "kind": RAYJOB.kind,
        "metadata": {
            "annotations": dict(spec.annotations),
            "labels": dict(spec.labels),
            "name": spec.name,
            "namespace": kube.namespace,
        },
        "spec": {
            "activeDeadlineSeconds": policy.active_deadline_seconds,
            "backoffLimit": policy.backoff_limit,
            "entrypoint": entrypoint(spec),
            "rayClusterSpec": {
                "enableInTreeAutoscaling": False,
                "headGroupSpec": head_group(spec, kube),
                "workerGroupSpecs": [worker_group(spec, kube)],
            },
            "runtimeEnvYAML": yaml.safe_dump(env, sort_keys=True) if env else None,
            "shutdownAfterJobFinishes": True,
            "submissionMode": SUBMISSION_MODE,
            "submitterPodTemplate": submitter_template(spec, kube),
            # Created suspended for Kueue (job.queue): only Kueue un-suspends it, on admission.
            "suspend": True if policy.suspend else None,
        },
    }
