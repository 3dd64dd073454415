"""A cluster's objects as the API server lists them (its JSON: camelCase dicts), behind
localcluster.kube's `Kube` interface, for tests of what localcluster reads of RayJobs and
their submitter pods without a cluster; and builders of the objects KubeRay v1.6.2 and the
Job controller make for a K8sJobMode RayJob (the shapes a real listing has: owner references,
the Job controller's pod labels, kwok's pod status).
"""

from __future__ import annotations

import copy
import uuid

from localcluster.kube import EXIT_CODE_ANNOTATION, JOB_NAME_LABEL

NAMESPACE = "training"
RUN_LABEL = "trainstack.io/run-id"


def _matches(obj: dict, selector: str | None) -> bool:
    """Equality-based label selectors (`a=b,c=d`), as the API server reads them."""
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


class RecordedKube:
    """`Kube` over a fixed listing; `annotate_pod` changes it, and is recorded."""

    def __init__(self, objects: list[dict]) -> None:
        self.objects = copy.deepcopy(objects)
        self.annotated: list[tuple[str, str, dict[str, str]]] = []

    def _of(self, kind: str, namespace: str | None = None) -> list[dict]:
        return [
            obj
            for obj in self.objects
            if obj["kind"] == kind
            and (namespace is None or obj["metadata"].get("namespace") == namespace)
        ]

    def rayjobs(self, selector: str | None = None) -> list[dict]:
        return copy.deepcopy([obj for obj in self._of("RayJob") if _matches(obj, selector)])

    def job(self, namespace: str, name: str) -> dict | None:
        found = [obj for obj in self._of("Job", namespace) if obj["metadata"]["name"] == name]
        return copy.deepcopy(found[0]) if found else None

    def pods(self, namespace: str | None, selector: str) -> list[dict]:
        return copy.deepcopy([obj for obj in self._of("Pod", namespace) if _matches(obj, selector)])

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        for pod in self._of("Pod", namespace):
            if pod["metadata"]["name"] == name:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
                self.annotated.append((namespace, name, dict(annotations)))
                return
        raise KeyError(f"no pod {namespace}/{name}")


def _owner(obj: dict) -> dict:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def rayjob(
    name: str,
    run_id: str,
    *,
    namespace: str = NAMESPACE,
    entrypoint: str = "python -m trainer.train",
    runtime_env_yaml: str | None = None,
    head_ip: str | None = "10.244.0.7",
) -> dict:
    """A RayJob past KubeRay's Initializing: a submission id, a dashboard URL, its Ray
    cluster's status mirrored (rayjob_controller.go)."""
    spec: dict = {
        "entrypoint": entrypoint,
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": True,
    }
    if runtime_env_yaml:
        spec["runtimeEnvYAML"] = runtime_env_yaml
    cluster = f"{name}-x7k2p"
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "labels": {RUN_LABEL: run_id, "kueue.x-k8s.io/queue-name": "training"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
        "status": {
            "jobId": f"{name}-q8r4t",
            "rayClusterName": cluster,
            "dashboardURL": f"{cluster}-head-svc.{namespace}.svc.cluster.local:8265",
            "jobDeploymentStatus": "Running",
            "jobStatus": "",
            "rayClusterStatus": {"head": {"podIP": head_ip}} if head_ip else {},
        },
    }


def submitter_job(owner: dict) -> dict:
    """KubeRay's submitter Job of RayJob `owner` (createNewK8sJob)."""
    meta = owner["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": str(uuid.uuid4()),
            "labels": {
                "ray.io/originated-from-cr-name": meta["name"],
                "ray.io/originated-from-crd": "RayJob",
                "app.kubernetes.io/created-by": "kuberay-operator",
            },
            "ownerReferences": [_owner(owner)],
        },
        "spec": {"backoffLimit": 2},
    }


def pod(
    name: str,
    owner: dict,
    phase: str,
    *,
    labels: dict[str, str] | None = None,
    created: str = "2026-01-01T00:01:00Z",
    started: str | None = "2026-01-01T00:01:02Z",
    exit_code: int | None = None,
    finished: str = "2026-01-01T00:05:00Z",
) -> dict:
    """A pod controlled by `owner`, as kwok leaves it: Running with its start time; ended by
    localcluster's exit stage (Succeeded/Failed, the container terminated with `exit_code`)."""
    status: dict = {"phase": phase}
    if started and phase != "Pending":
        status["startTime"] = started
    if exit_code is not None:
        status["containerStatuses"] = [
            {
                "name": "ray-job-submitter",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "finishedAt": finished,
                        "reason": "Completed" if exit_code == 0 else "Error",
                        "startedAt": finished,
                    }
                },
            }
        ]
    meta: dict = {
        "name": name,
        "namespace": owner["metadata"]["namespace"],
        "uid": str(uuid.uuid4()),
        "labels": dict(labels or {}),
        "creationTimestamp": created,
        "ownerReferences": [_owner(owner)],
    }
    if exit_code is not None:
        meta["annotations"] = {EXIT_CODE_ANNOTATION: str(exit_code)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}, "status": status}


def submitter_pod(job: dict, suffix: str, phase: str, run_id: str, **kw) -> dict:
    """A pod of submitter Job `job`, labelled by the Job controller (and carrying the run's
    labels from the RayJob's submitterPodTemplate, as trainstack's do)."""
    name = job["metadata"]["name"]
    labels = {
        JOB_NAME_LABEL: name,
        "job-name": name,
        "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
        "controller-uid": job["metadata"]["uid"],
        RUN_LABEL: run_id,
    }
    return pod(f"{name}-{suffix}", job, phase, labels=labels, **kw)


def ray_node_pod(owner_cluster: dict, node_type: str, index: int, run_id: str) -> dict:
    """A head or worker pod of the RayJob's RayCluster (`owner_cluster`), Running."""
    name = owner_cluster["metadata"]["name"]
    labels = {
        "ray.io/cluster": name,
        "ray.io/node-type": node_type,
        RUN_LABEL: run_id,
    }
    return pod(f"{name}-{node_type}-{index}", owner_cluster, "Running", labels=labels)


def raycluster(owner: dict) -> dict:
    meta = owner["metadata"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": owner["status"]["rayClusterName"],
            "namespace": meta["namespace"],
            "uid": str(uuid.uuid4()),
            "ownerReferences": [_owner(owner)],
        },
    }
