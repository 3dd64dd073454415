"""`batch/v1` Jobs on the cluster (the `data prepare` Indexed Job, the eval Jobs), through the
official client and `Cluster.call` (one-line errors, bounded retries), like the PyTorchJob
code."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from jobs.backends.kubernetes.client.api import Cluster, ClusterError, status_of
from jobs.backends.kubernetes.client.ownership import ensure_ours

CREATED, ALREADY_SUBMITTED = "created", "already submitted"


@dataclass(frozen=True)
class JobProgress:
    name: str
    state: str
    """Pending, Running, Succeeded or Failed."""
    succeeded: int
    failed: int
    active: int
    completions: int
    failed_indexes: str
    """The indexes that ran out of retries (`status.failedIndexes`, e.g. `1,3-4`)."""

    def line(self) -> str:
        text = (
            f"{self.name}: {self.state}, {self.succeeded}/{self.completions} slices done, "
            f"{self.active} running, {self.failed} failed pods"
        )
        return text + (f", failed slices {self.failed_indexes}" if self.failed_indexes else "")


def _batch(cluster: Cluster):
    from kubernetes.client import BatchV1Api  # lazy: start-up (kubernetes client)

    return BatchV1Api(cluster.core.api_client)


def _plain(cluster: Cluster, obj) -> dict:
    return cluster.core.api_client.sanitize_for_serialization(obj)


def submit_job(cluster: Cluster, job: dict) -> tuple[str, dict]:
    """Create the Job; the same name already there is reported, never replaced (its shards
    and markers may be in use; delete the Job to start over)."""
    name = job["metadata"]["name"]
    where = f"{cluster.namespace}/{name}"
    try:
        created = cluster.call(
            f"create Job {where}",
            _batch(cluster).create_namespaced_job,
            cluster.namespace,
            job,
            expect=(409,),
        )
    except Exception as exc:
        if status_of(exc) != 409:
            raise
        existing = get_job(cluster, name)
        if existing is None:
            raise ClusterError(f"create Job {where} failed: conflict") from exc
        ensure_ours("Job", cluster.namespace, name, existing)
        return ALREADY_SUBMITTED, existing
    return CREATED, _plain(cluster, created)


def get_job(cluster: Cluster, name: str) -> dict | None:
    found = cluster.call_or_none(
        f"get Job {cluster.namespace}/{name}",
        _batch(cluster).read_namespaced_job,
        name,
        cluster.namespace,
    )
    return None if found is None else _plain(cluster, found)


def list_jobs(cluster: Cluster, selector: str) -> list[dict]:
    """The namespace's Jobs with these labels (e.g. a run's eval Jobs)."""
    listing = cluster.call(
        f"list Jobs in {cluster.namespace} ({selector})",
        _batch(cluster).list_namespaced_job,
        cluster.namespace,
        label_selector=selector,
    )
    return _plain(cluster, listing).get("items") or []


def progress(job: dict) -> JobProgress:
    status = job.get("status") or {}
    true = {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in true or "SuccessCriteriaMet" in true:
        state = "Succeeded"
    elif "Failed" in true or "FailureTarget" in true:
        state = "Failed"
    else:
        state = "Running" if status.get("active") or status.get("succeeded") else "Pending"
    return JobProgress(
        name=job["metadata"]["name"],
        state=state,
        succeeded=status.get("succeeded") or 0,
        failed=status.get("failed") or 0,
        active=status.get("active") or 0,
        completions=(job.get("spec") or {}).get("completions") or 1,
        failed_indexes=status.get("failedIndexes") or "",
    )


def wait_job(
    cluster: Cluster,
    name: str,
    poll_s: float,
    on_change: Callable[[JobProgress], None] = lambda p: None,
) -> JobProgress:
    """Poll until the Job ends; report every change of its counts."""
    last = None
    while True:
        job = get_job(cluster, name)
        if job is None:
            raise ClusterError(f"Job {cluster.namespace}/{name} was deleted while waiting")
        now = progress(job)
        if now != last:
            on_change(now)
            last = now
        if now.state in ("Succeeded", "Failed"):
            return now
        time.sleep(poll_s)
