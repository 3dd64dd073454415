"""A job object as trainstack reports it: its RunStatus (the state `trainstack runs` prints,
the run dir's last step and loss, retries, the failure message) and the labels a run is found
by. Pure: no cluster call (the backend adds Kueue's reason for a queued job, and a TrainJob's
JobSet restarts, itself); the Training API's snapshot reads job objects it listed with it."""

from __future__ import annotations

from jobs.backends import run_state
from jobs.backends.base import (
    CANCELLED,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    RunStatus,
)
from jobs.backends.kubernetes.client import state as k8s_state
from jobs.backends.kubernetes.client.kinds import JobKind, kind_of
from jobs.backends.kubernetes.pod_parts import INSTANCE_TYPE_LABEL
from jobs.backends.kubernetes.trainjob import INSTANCE_TYPE_ANNOTATION
from jobs.spec import LABEL_PREFIX, OWNER_LABEL

RUN_DIR_ANNOTATION = f"{LABEL_PREFIX}/run-dir"
SWEEP_LABEL = f"{LABEL_PREFIX}/sweep-id"
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=trainstack"
_STATES = {
    "Pending": PENDING,
    "Created": PENDING,
    "Suspended": QUEUED,
    "Running": RUNNING,
    "Restarting": RUNNING,
    "Succeeded": SUCCEEDED,
    "Failed": FAILED,
    "Cancelled": CANCELLED,
}


def deleted(run_id: str, kind: JobKind) -> RunStatus:
    """The status of a run whose job object was deleted while it was followed."""
    return RunStatus(run_id, CANCELLED, "kubernetes", message=f"the {kind.kind} was deleted")


def instance_type_of(job: dict) -> str | None:
    """The instance type a job object's pods run on: a TrainJob's annotation (its pods' node
    selector is the runtime's), else the first pod template's node selector."""
    annotated = k8s_state.annotations(job).get(INSTANCE_TYPE_ANNOTATION)
    if annotated:
        return annotated
    for template in kind_of(job).pod_templates(job):
        pod = template.get("spec") or {}
        found = (pod.get("nodeSelector") or {}).get(INSTANCE_TYPE_LABEL)
        if found:
            return found
    return None


def to_status(job: dict) -> RunStatus:
    """A RunStatus from the job object (and its run dir's metrics, when readable)."""
    meta = job["metadata"]
    status = job.get("status") or {}
    state = _STATES[k8s_state.job_state(job)]
    run_dir = k8s_state.annotations(job).get(RUN_DIR_ANNOTATION)
    step, loss = run_state.last_metrics(run_dir)
    message = k8s_state.failure_message(job) if state == FAILED else ""
    nodes = k8s_state.nodes(job)
    return RunStatus(
        run_id=meta["name"],
        state=state,
        backend="kubernetes",
        sweep_id=(meta.get("labels") or {}).get(SWEEP_LABEL),
        nodes=nodes,
        # `logs --rank N`: node rank N's pod; a RayJob has one log, its driver's.
        log_ranks=nodes if kind_of(job).log_ranks else 1,
        started_at=status.get("startTime") or meta.get("creationTimestamp"),
        finished_at=k8s_state.finished_at(job),
        last_step=step,
        last_loss=loss,
        retries=k8s_state.retries(job),
        message=message,
        run_dir=run_dir,
        owner=(meta.get("labels") or {}).get(OWNER_LABEL),
    )
