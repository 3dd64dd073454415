"""Idempotent submission of a run: ConfigMap(s) and the run's NetworkPolicy first, the job (a
TrainJob or a PyTorchJob) second, owner-linked.

The run id is the job's name, so submitting it again can never make a second job: an active
job is reported and left alone; a finished one (Succeeded, Failed, Cancelled) is deleted and
created again under the same name, and the trainer resumes from the latest checkpoint in its
run dir (the run dir itself is never touched here). If creating the job fails, the ConfigMaps
(and the NetworkPolicy) this call created are deleted again, so nothing is left half-submitted.
Once the job exists, it becomes the owner of each, so deleting the job deletes them with it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobs.backends.kubernetes.client.api import Cluster, ClusterError, describe, status_of
from jobs.backends.kubernetes.client.kinds import BY_KIND, PYTORCHJOB, JobKind
from jobs.backends.kubernetes.client.ownership import MANAGED_BY, MANAGER, ensure_ours, labels_of
from jobs.backends.kubernetes.client.state import RETRIES_ANNOTATION, is_final, job_state
from jobs.backends.kubernetes.faults import maybe_pause
from jobs.spec import RUN_ID_LABEL

CREATED, ALREADY_ACTIVE, RESUMED = "created", "already active", "resumed"
COMPANION_KINDS = ("ConfigMap", "NetworkPolicy")
"""Objects created before the job and owned by it once it exists."""


@dataclass(frozen=True)
class Submission:
    run_id: str
    outcome: str
    """created, already active (nothing was sent) or resumed (a finished job was replaced)."""
    job: dict
    """The job as the API server returned it."""


def submit(cluster: Cluster, manifests: list[dict], *, retries: int = 0) -> Submission:
    """Apply one run's manifests (one TrainJob or PyTorchJob plus ConfigMaps and its
    NetworkPolicy); see the module docstring."""
    kinds = {m.get("kind") for m in manifests}
    unsupported = sorted(kinds - {*BY_KIND, *COMPANION_KINDS}, key=str)
    jobs = [m for m in manifests if m.get("kind") in BY_KIND]
    if unsupported or len(jobs) != 1:
        raise ClusterError(
            f"cannot submit manifests of kind {unsupported or sorted(kinds, key=str)}: one "
            f"TrainJob or PyTorchJob, and {', '.join(COMPANION_KINDS)}"
        )
    job = copy.deepcopy(jobs[0])
    kind = BY_KIND[job["kind"]]
    companions = [m for m in manifests if m.get("kind") in COMPANION_KINDS]
    name = job["metadata"]["name"]
    outcome = CREATED
    existing = cluster.get_job(name, kind)
    ensure_ours(kind.kind, cluster.namespace, name, existing)
    for companion in companions:  # all checked before anything is written
        c_kind, c_name = companion["kind"], companion["metadata"]["name"]
        ensure_ours(c_kind, cluster.namespace, c_name, _read_companion(cluster, c_kind, c_name))
    if existing is not None:
        if not is_final(job_state(existing)):
            return Submission(name, ALREADY_ACTIVE, existing)
        delete_job(cluster, name, kind=kind)
        outcome = RESUMED
    job["metadata"].setdefault("annotations", {})[RETRIES_ANNOTATION] = str(retries)

    created_maps = [_apply_companion(cluster, cm) for cm in companions]
    maybe_pause("submit:companions")
    try:
        created = cluster.call(
            f"create {kind.kind} {cluster.namespace}/{name}",
            cluster.custom.create_namespaced_custom_object,
            kind.group,
            kind.version,
            cluster.namespace,
            kind.plural,
            job,
            expect=(409,),
        )
    except Exception as exc:
        winner = cluster.get_job(name, kind) if status_of(exc) == 409 else None
        if winner is not None and labels_of(winner).get(MANAGED_BY) != MANAGER:
            for companion in created_maps:
                _delete_companion(cluster, companion)
            ensure_ours(kind.kind, cluster.namespace, name, winner)
        if winner is not None:
            # Another submitter created the same run id between our check and our create:
            # theirs is the run. The ConfigMaps hold the same run's config; give them its owner.
            _own(cluster, created_maps, winner)
            return Submission(name, ALREADY_ACTIVE, winner)
        for companion in created_maps:
            _delete_companion(cluster, companion)
        if isinstance(exc, ClusterError):
            raise
        raise ClusterError(
            f"create {kind.kind} {cluster.namespace}/{name} failed: conflict"
        ) from exc
    _own(cluster, created_maps, created)
    return Submission(name, outcome, created)


def delete_job(
    cluster: Cluster,
    name: str,
    timeout_s: float = 120.0,
    wait: bool = True,
    kind: JobKind = PYTORCHJOB,
) -> None:
    """Delete the job and (`wait`) block, bounded, until it and its dependents are gone
    (Foreground: the job stays, with a deletionTimestamp, until its pods are deleted)."""
    from kubernetes.client import V1DeleteOptions  # lazy: start-up (kubernetes client)

    cluster.call_or_none(
        f"delete {kind.kind} {cluster.namespace}/{name}",
        cluster.custom.delete_namespaced_custom_object,
        kind.group,
        kind.version,
        cluster.namespace,
        kind.plural,
        name,
        body=V1DeleteOptions(propagation_policy="Foreground"),
    )
    if not wait:
        return
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while cluster.get_job(name, kind) is not None:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{kind.kind} {cluster.namespace}/{name} still exists {timeout_s:.0f}s after delete"
            )
        cluster.sleep(delay)
        delay = min(delay * 2, 2.0)


def _verbs(cluster: Cluster, kind: str) -> dict[str, Callable[..., Any]]:
    """The client methods for a companion kind: create, read, replace, patch, delete."""
    if kind == "ConfigMap":
        api, suffix = cluster.core, "config_map"
    else:
        api, suffix = cluster.networking, "network_policy"
    return {
        verb: getattr(api, f"{verb}_namespaced_{suffix}")
        for verb in ("create", "read", "replace", "patch", "delete")
    }


def _apply_companion(cluster: Cluster, companion: dict) -> tuple[str, str]:
    """Create the ConfigMap (or NetworkPolicy); replace a leftover of an earlier submission of
    the same run. Returns (kind, name)."""
    kind, name = companion["kind"], companion["metadata"]["name"]
    body = copy.deepcopy(companion)
    body["metadata"].pop("ownerReferences", None)
    action = f"create {kind} {cluster.namespace}/{name}"
    try:
        cluster.call(
            action, _verbs(cluster, kind)["create"], cluster.namespace, body, expect=(409,)
        )
    except Exception as exc:
        if status_of(exc) != 409:
            raise
        # Left by a submission whose job is gone (or going): ours replaces it, and dropping the
        # stale owner reference keeps the garbage collector from deleting it under the new job.
        _replace_companion(cluster, kind, name, body)
    return kind, name


def _read_companion(cluster: Cluster, kind: str, name: str):
    return cluster.call_or_none(
        f"get {kind} {cluster.namespace}/{name}",
        _verbs(cluster, kind)["read"],
        name,
        cluster.namespace,
    )


def _replace_companion(
    cluster: Cluster, kind: str, name: str, body: dict, attempts: int = 3
) -> None:
    """An update must name the resourceVersion it replaces; a concurrent change (409
    Conflict) means read it again and retry. Only ever one of ours (managed-by)."""
    action = f"replace {kind} {cluster.namespace}/{name}"
    for attempt in range(1, attempts + 1):
        current = _read_companion(cluster, kind, name)
        if current is None:
            raise ClusterError(f"{action} failed: it was deleted meanwhile; submit again")
        ensure_ours(kind, cluster.namespace, name, current)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        try:
            cluster.call(
                action,
                _verbs(cluster, kind)["replace"],
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


def leftover_companions(
    cluster: Cluster, companions: list[tuple[str, str]], run_id: str
) -> list[tuple[str, str]]:
    """Of the companions (kind, name), those a submission of `run_id` cut short left: there,
    trainstack's (managed-by), labelled with that run, and without an owner. An object of the
    same name that anyone else made, or that a job owns, is never touched."""
    left = []
    for companion in companions:
        obj = _read_companion(cluster, *companion)
        if obj is None:
            continue
        labels = labels_of(obj)
        meta = obj.get("metadata", {}) if isinstance(obj, dict) else obj.metadata
        owners = meta.get("ownerReferences") if isinstance(meta, dict) else meta.owner_references
        if labels.get(MANAGED_BY) == MANAGER and labels.get(RUN_ID_LABEL) == run_id and not owners:
            left.append(companion)
    return left


def adopt_companions(cluster: Cluster, companions: list[tuple[str, str]], job: dict) -> None:
    """Give `job` the companions (kind, name) a submission cut short left without an owner
    (leftover_companions picks them)."""
    _own(cluster, companions, job)


def delete_companion(cluster: Cluster, companion: tuple[str, str]) -> None:
    """Delete a companion (kind, name); gone already is fine."""
    _delete_companion(cluster, companion)


def _own(cluster: Cluster, companions: list[tuple[str, str]], job: dict) -> None:
    kind = BY_KIND[job.get("kind", PYTORCHJOB.kind)]
    owner = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    for kind, name in companions:
        cluster.call(
            f"patch {kind} {cluster.namespace}/{name}",
            _verbs(cluster, kind)["patch"],
            name,
            cluster.namespace,
            {"metadata": {"ownerReferences": [owner]}},
        )


def _delete_companion(cluster: Cluster, companion: tuple[str, str]) -> None:
    kind, name = companion
    cluster.call_or_none(
        f"delete {kind} {cluster.namespace}/{name}",
        _verbs(cluster, kind)["delete"],
        name,
        cluster.namespace,
    )
