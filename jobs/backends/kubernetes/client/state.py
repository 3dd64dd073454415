"""What a job object (PyTorchJob, TrainJob or RayJob) says about its run: state, retries,
cancellation, nodes, the pod of each rank.

Pure functions over the job dict as the API returns it, shared by submit, watch, status and
the sweep launcher. Every kind maps onto one set of states (JobKind.status_reader): a
PyTorchJob by the training operator's conditions, a TrainJob by Trainer's (Complete, Failed,
Suspended) and its jobs' status (active pods: Running), a RayJob by KubeRay's
jobDeploymentStatus and the Ray job's status.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from jobs.backends.kubernetes.client.kinds import kind_of

RETRIES_ANNOTATION = "trainstack.io/retries"
"""Auto-restarts so far (resubmissions of the same run id after Failed)."""
CANCELLED_ANNOTATION = "trainstack.io/cancelled-at"
"""Set by `trainstack cancel`: a cancelled job is never restarted automatically."""
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

FINAL_STATES = ("Succeeded", "Failed", "Cancelled")
"""A Suspended job is NOT finished: Kueue holds it until it is admitted (or re-admits it after
preemption), or an admin paused it; only `trainstack cancel` (the annotation) makes a
suspended job Cancelled."""
# The operator's condition types, most decisive first.
_PRECEDENCE = ("Succeeded", "Failed", "Suspended", "Restarting", "Running", "Created")
TRAINJOB_TTL_S = 7 * 24 * 3600
"""A finished or cancelled TrainJob is deleted this long after, by trainstack (`expired`): its
runtime's JobSet has no TTL, since Trainer would recreate a deleted one
(jobs.backends.kubernetes.runtimes)."""


@dataclass(frozen=True)
class Condition:
    type: str
    reason: str
    message: str
    since: str


def conditions(job: dict) -> list[Condition]:
    """The job's conditions that are currently true, in the order the operator added them."""
    return [
        Condition(
            c["type"], c.get("reason", ""), c.get("message", ""), c.get("lastTransitionTime", "")
        )
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    ]


def job_state(job: dict) -> str:
    """Pending, Created, Running, Restarting, Succeeded, Failed, Suspended or Cancelled.

    Suspended: `spec.runPolicy.suspend` is set (Kueue has not admitted it yet, or preempted
    it) and the job has not ended. Cancelled: suspended (or never started) by `trainstack
    cancel`."""
    true_types = {c.type for c in conditions(job)}
    reader = kind_of(job).reader
    if reader == "trainer":
        return _trainjob_state(job, true_types)
    if reader == "kuberay":
        return _rayjob_state(job)
    for kind in ("Succeeded", "Failed"):
        if kind in true_types:
            return kind
    if is_suspended(job) or "Suspended" in true_types:
        return "Cancelled" if is_cancelled(job) else "Suspended"
    for kind in _PRECEDENCE:
        if kind in true_types:
            return kind
    return "Cancelled" if is_cancelled(job) else "Pending"


def _trainjob_state(job: dict, true_types: set[str]) -> str:
    """Trainer's conditions: Complete or Failed end it; Suspended (or spec.suspend) holds it;
    otherwise it runs once its JobSet has active pods."""
    if "Complete" in true_types:
        return "Succeeded"
    if "Failed" in true_types:
        return "Failed"
    if is_suspended(job) or "Suspended" in true_types:
        return "Cancelled" if is_cancelled(job) else "Suspended"
    jobs = (job.get("status") or {}).get("jobsStatus") or []
    # Its pods ended but Complete is not set yet (Trainer writes the counts first, the
    # condition on a later reconcile): still Running, not back to Created.
    if any(int(j.get("active") or 0) + int(j.get("succeeded") or 0) > 0 for j in jobs):
        return "Running"
    if is_cancelled(job):
        return "Cancelled"
    return "Created" if (job.get("metadata") or {}).get("uid") else "Pending"


# ray-project/kuberay ray-operator/v1.6.2, apis/ray/v1/rayjob_types.go: JobDeploymentStatus
# ("" is New) and the Ray job's JobStatus.
_RAY_STARTING = ("", "New", "Initializing", "Waiting")
_RAY_ENDED = ("Complete", "Failed", "ValidationFailed")


def _rayjob_state(job: dict) -> str:
    """KubeRay's jobDeploymentStatus: Complete ends it Succeeded when the Ray job SUCCEEDED
    (STOPPED or FAILED otherwise: Failed, or Cancelled if `trainstack cancel` stopped it);
    Failed and ValidationFailed end it Failed; `spec.suspend` (Kueue has not admitted it, or
    `cancel`) or Suspending/Suspended hold it; Retrying is a new Ray cluster for a retry."""
    status = job.get("status") or {}
    deployment = str(status.get("jobDeploymentStatus") or "")
    if deployment in _RAY_ENDED:
        if deployment == "Complete" and status.get("jobStatus") == "SUCCEEDED":
            return "Succeeded"
        return "Cancelled" if is_cancelled(job) else "Failed"
    if is_suspended(job) or deployment in ("Suspending", "Suspended"):
        return "Cancelled" if is_cancelled(job) else "Suspended"
    if deployment == "Retrying":
        return "Restarting"
    if deployment == "Running":
        return "Running"
    if is_cancelled(job):
        return "Cancelled"
    return "Created" if (job.get("metadata") or {}).get("uid") else "Pending"


def finished_at(job: dict) -> str | None:
    """When the job ended: a PyTorchJob's completionTime; a TrainJob has none, so its Complete
    or Failed condition's transition time; a RayJob's endTime (KubeRay's)."""
    status = job.get("status") or {}
    reader = kind_of(job).reader
    if reader == "kuberay":
        return status.get("endTime") if job_state(job) in FINAL_STATES else None
    stamp = status.get("completionTime")
    if stamp or reader != "trainer":
        return stamp
    ended = [c.since for c in conditions(job) if c.type in ("Complete", "Failed")]
    return ended[-1] if ended and ended[-1] else None


def is_suspended(job: dict) -> bool:
    return kind_of(job).is_suspended(job)


def nodes(job: dict) -> int:
    """The job's node (pod) count."""
    kind = kind_of(job)
    if kind.runs_on_jobset:
        return int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
    return sum(kind.replica_counts(job).values())


def cancelled_at(job: dict) -> datetime | None:
    return _parse(annotations(job).get(CANCELLED_ANNOTATION))


def _parse(stamp: str | None) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def expired(job: dict, now: datetime) -> bool:
    """A job trainstack deletes now (the kubernetes backend's `list_runs`): a cancelled one
    older than its `ttlSecondsAfterFinished` (the operator's TTL only counts Succeeded and
    Failed jobs; a cancelled, suspended one is never finished to it), and a TrainJob that
    finished or was cancelled more than TRAINJOB_TTL_S ago (no TTL deletes it or its JobSet:
    jobs.backends.kubernetes.runtimes says why), and so a RayJob (KubeRay deletes its Ray
    cluster, not the RayJob)."""
    state = job_state(job)
    if kind_of(job).kept:
        ttl = TRAINJOB_TTL_S
        when = cancelled_at(job) if state == "Cancelled" else _parse(finished_at(job))
        if state not in FINAL_STATES:
            return False
    else:
        ttl = ((job.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
        when = cancelled_at(job)
        if state != "Cancelled":
            return False
    if when is None or ttl is None:
        return False
    return (now - when).total_seconds() > int(ttl)


def is_final(state: str) -> bool:
    return state in FINAL_STATES


PRE_START_STATES = ("Pending", "Created")


def went_back(previous: str | None, state: str) -> bool:
    """`state` read after `previous` is a moment's read of a running job, not a change: a
    TrainJob's pods that just ended are counted nowhere for a moment. The Job controller first
    moves a finished pod to `status.uncountedTerminatedPods` with `active` already lowered,
    and counts it as succeeded on a later sync (kubernetes v1.35.4,
    pkg/controller/job/job_controller.go `trackJobStatusAndRemoveFinalizers`); JobSet counts a
    Job active only for `status.active > 0` and ready only for `succeeded + ready` (jobset
    v0.12.0, pkg/controllers/jobset_controller.go `calculateReplicatedJobStatuses`), and
    Trainer copies those counts. Such a read looks like a job not started yet (Created), so
    a follower keeps Running until a state that is not a pre-start one comes."""
    return previous == "Running" and state in PRE_START_STATES


def is_cancelled(job: dict) -> bool:
    return CANCELLED_ANNOTATION in annotations(job)


def annotations(job: dict) -> dict:
    return (job.get("metadata") or {}).get("annotations") or {}


def retries(job: dict) -> int:
    try:
        return int(annotations(job).get(RETRIES_ANNOTATION, 0))
    except ValueError:
        return 0


def failure_message(job: dict) -> str:
    """The Failed condition's reason and message (a RayJob's status reason and message), for
    the user's one-line summary."""
    if kind_of(job).reader == "kuberay":
        status = job.get("status") or {}
        reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
        return f"{reason}: {message}".strip(": ")
    for cond in reversed(conditions(job)):
        if cond.type == "Failed":
            return f"{cond.reason}: {cond.message}".strip(": ")
    return ""


def check_rank(job: dict, rank: int) -> None:
    """ValueError unless `rank` is one of the job's node ranks (or, for a kind whose run has
    one log, its submitter's, rank 0)."""
    kind = kind_of(job)
    if not kind.log_ranks and rank != 0:
        raise ValueError(
            f"--rank {rank}: a {kind.kind}'s log is its driver's (Ray sends every worker's "
            "output there); allowed: --rank 0"
        )
    count = nodes(job)
    if rank < 0 or rank >= count:
        raise ValueError(f"--rank {rank} is out of range: the job has ranks 0..{count - 1}")


def pod_for_rank(job: dict, rank: int) -> tuple[str, int]:
    """(replica type, lowercase; index) of an operator-run job's node rank `rank`, numbered
    across its kind's `rank_replicas` in order: a PyTorchJob's rank 0 is the Master when the
    job has one; elastic jobs are Worker-only."""
    kind = kind_of(job)
    counts = kind.replica_counts(job)
    ranked = [(rtype, counts.get(rtype, 0)) for rtype in kind.rank_replicas]
    total = sum(count for _, count in ranked)
    if rank < 0 or rank >= total:
        raise ValueError(f"--rank {rank} is out of range: the job has ranks 0..{total - 1}")
    index = rank
    for rtype, count in ranked:
        if index < count:
            return rtype.lower(), index
        index -= count
    raise AssertionError("unreachable: rank < total")
