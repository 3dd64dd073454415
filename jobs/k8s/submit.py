"""Idempotent submission of a run: ConfigMap(s) first, the PyTorchJob second, owner-linked.

The run id is the job's name, so submitting it again can never make a second job: an active
job is reported and left alone; a finished one (Succeeded, Failed, Cancelled) is deleted and
created again under the same name, and the trainer resumes from the latest checkpoint in its
run dir (the run dir itself is never touched here). If creating the job fails, the ConfigMaps
this call created are deleted again, so nothing is left half-submitted. Once the job exists,
it becomes each ConfigMap's owner, so deleting the job deletes them with it.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from jobs.k8s.api import GROUP, PLURAL, VERSION, Cluster, ClusterError, describe, status_of
from jobs.k8s.ownership import MANAGED_BY, MANAGER, ensure_ours, labels_of
from jobs.k8s.state import RETRIES_ANNOTATION, is_final, job_state

CREATED, ALREADY_ACTIVE, RESUMED = "created", "already active", "resumed"


@dataclass(frozen=True)
class Submission:
    run_id: str
    outcome: str
    """created, already active (nothing was sent) or resumed (a finished job was replaced)."""
    job: dict
    """The PyTorchJob as the API server returned it."""


def submit(cluster: Cluster, manifests: list[dict], *, retries: int = 0) -> Submission:
    """Apply one run's manifests (one PyTorchJob plus ConfigMaps); see the module docstring."""
    job = copy.deepcopy(next(m for m in manifests if m.get("kind") == "PyTorchJob"))
    config_maps = [m for m in manifests if m.get("kind") == "ConfigMap"]
    unsupported = sorted({m.get("kind") for m in manifests} - {"PyTorchJob", "ConfigMap"})
    if unsupported:
        raise ClusterError(
            f"cannot submit manifests of kind {unsupported}: only PyTorchJob and ConfigMap"
        )
    name = job["metadata"]["name"]
    outcome = CREATED
    existing = cluster.get_job(name)
    ensure_ours("PyTorchJob", cluster.namespace, name, existing)
    for cm in config_maps:  # all checked before anything is written
        cm_name = cm["metadata"]["name"]
        ensure_ours("ConfigMap", cluster.namespace, cm_name, _read_config_map(cluster, cm_name))
    if existing is not None:
        if not is_final(job_state(existing)):
            return Submission(name, ALREADY_ACTIVE, existing)
        delete_job(cluster, name)
        outcome = RESUMED
    job["metadata"].setdefault("annotations", {})[RETRIES_ANNOTATION] = str(retries)

    created_maps = [_apply_config_map(cluster, cm) for cm in config_maps]
    try:
        created = cluster.call(
            f"create PyTorchJob {cluster.namespace}/{name}",
            cluster.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            cluster.namespace,
            PLURAL,
            job,
            expect=(409,),
        )
    except Exception as exc:
        winner = cluster.get_job(name) if status_of(exc) == 409 else None
        if winner is not None and labels_of(winner).get(MANAGED_BY) != MANAGER:
            for cm_name in created_maps:
                _delete_config_map(cluster, cm_name)
            ensure_ours("PyTorchJob", cluster.namespace, name, winner)
        if winner is not None:
            # Another submitter created the same run id between our check and our create:
            # theirs is the run. The ConfigMaps hold the same run's config; give them its owner.
            _own(cluster, created_maps, winner)
            return Submission(name, ALREADY_ACTIVE, winner)
        for cm_name in created_maps:
            _delete_config_map(cluster, cm_name)
        if isinstance(exc, ClusterError):
            raise
        raise ClusterError(
            f"create PyTorchJob {cluster.namespace}/{name} failed: conflict"
        ) from exc
    _own(cluster, created_maps, created)
    return Submission(name, outcome, created)


def delete_job(cluster: Cluster, name: str, timeout_s: float = 120.0, wait: bool = True) -> None:
    """Delete the job and (`wait`) block, bounded, until it and its dependents are gone
    (Foreground: the job stays, with a deletionTimestamp, until its pods are deleted)."""
    from kubernetes.client import V1DeleteOptions

    cluster.call_or_none(
        f"delete PyTorchJob {cluster.namespace}/{name}",
        cluster.custom.delete_namespaced_custom_object,
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        body=V1DeleteOptions(propagation_policy="Foreground"),
    )
    if not wait:
        return
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while cluster.get_job(name) is not None:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"PyTorchJob {cluster.namespace}/{name} still exists {timeout_s:.0f}s after delete"
            )
        cluster.sleep(delay)
        delay = min(delay * 2, 2.0)


def _apply_config_map(cluster: Cluster, config_map: dict) -> str:
    """Create the ConfigMap; replace a leftover of an earlier submission of the same run."""
    name = config_map["metadata"]["name"]
    body = copy.deepcopy(config_map)
    body["metadata"].pop("ownerReferences", None)
    action = f"create ConfigMap {cluster.namespace}/{name}"
    try:
        cluster.call(
            action,
            cluster.core.create_namespaced_config_map,
            cluster.namespace,
            body,
            expect=(409,),
        )
    except Exception as exc:
        if status_of(exc) != 409:
            raise
        # Left by a submission whose job is gone (or going): ours replaces it, and dropping the
        # stale owner reference keeps the garbage collector from deleting it under the new job.
        _replace_config_map(cluster, name, body)
    return name


def _read_config_map(cluster: Cluster, name: str):
    return cluster.call_or_none(
        f"get ConfigMap {cluster.namespace}/{name}",
        cluster.core.read_namespaced_config_map,
        name,
        cluster.namespace,
    )


def _replace_config_map(cluster: Cluster, name: str, body: dict, attempts: int = 3) -> None:
    """An update must name the resourceVersion it replaces; a concurrent change (409
    Conflict) means read it again and retry. Only ever one of ours (managed-by)."""
    action = f"replace ConfigMap {cluster.namespace}/{name}"
    for attempt in range(1, attempts + 1):
        current = _read_config_map(cluster, name)
        if current is None:
            raise ClusterError(f"{action} failed: it was deleted meanwhile; submit again")
        ensure_ours("ConfigMap", cluster.namespace, name, current)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        try:
            cluster.call(
                action,
                cluster.core.replace_namespaced_config_map,
                name,
                cluster.namespace,
                body,
                expect=(409,),
            )
            return
        except Exception as exc:
            if status_of(exc) != 409 or attempt == attempts:
                if isinstance(exc, ClusterError):
                    raise
                raise ClusterError(f"{action} failed: {describe(exc)}") from exc


def _own(cluster: Cluster, config_maps: list[str], job: dict) -> None:
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    for name in config_maps:
        cluster.call(
            f"patch ConfigMap {cluster.namespace}/{name}",
            cluster.core.patch_namespaced_config_map,
            name,
            cluster.namespace,
            {"metadata": {"ownerReferences": [owner]}},
        )


def _delete_config_map(cluster: Cluster, name: str) -> None:
    cluster.call_or_none(
        f"delete ConfigMap {cluster.namespace}/{name}",
        cluster.core.delete_namespaced_config_map,
        name,
        cluster.namespace,
    )
