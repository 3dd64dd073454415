"""Checks on a job's run policy (`job.*`): retries, restarts, deadlines, TTL, grace period,
queue, priority, owner and secret references, each within its bounds."""

from __future__ import annotations

from typing import Any

from jobs.errors import JobConfigError
from jobs.references import DNS1123_SUBDOMAIN, LABEL_VALUE
from jobs.schema import CLEAN_POD_POLICIES
from jobs.validate_common import at_least, at_most, listed

JOB_LIMITS = {
    "termination_grace_period_seconds": 3600,
    "max_restarts": 100,
    "max_retries": 100,
    "ttl_seconds_after_finished": 90 * 24 * 3600,
    "active_deadline_seconds": 90 * 24 * 3600,
}
"""The most each job key may be: a checkpoint's save window, restarts and resubmissions of a
run that keeps failing, how long a finished job stays on the cluster, and how long one may
run (an unbounded deadline was rendered as 1e20, past Kubernetes' int64)."""


def check_job_policy(cfg: Any) -> None:
    job = cfg.job
    if job.clean_pod_policy not in CLEAN_POD_POLICIES:
        raise JobConfigError(
            "job.clean_pod_policy",
            f"{job.clean_pod_policy!r} is not allowed; allowed: {listed(CLEAN_POD_POLICIES)}",
        )
    at_least("job.max_retries", job.max_retries, 0)
    at_least("job.max_restarts", job.max_restarts, 0)
    for key in ("queue", "priority"):
        value = job[key]
        if value is not None and not DNS1123_SUBDOMAIN.match(value):
            raise JobConfigError(
                f"job.{key}", f"{value!r} is not allowed; allowed: a DNS-1123 name"
            )
    if job.owner is not None and not LABEL_VALUE.match(job.owner):
        raise JobConfigError(
            "job.owner",
            f"{job.owner!r} is not allowed; allowed: a label value (letters, digits, . _ -; "
            "at most 63; set $TRAINSTACK_USER)",
        )
    if job.priority is not None and job.queue is None:
        raise JobConfigError("job.priority", "needs job.queue (priorities are Kueue's)")
    at_least("job.ttl_seconds_after_finished", job.ttl_seconds_after_finished, 0)
    at_least("job.active_deadline_seconds", job.active_deadline_seconds, 1)
    at_least("job.termination_grace_period_seconds", job.termination_grace_period_seconds, 60)
    # Upper bounds: a cancelled or preempted job must give its GPUs back (grace), a crashing
    # one must stop (restarts), a finished one must go (TTL), whoever set them.
    for key, most in JOB_LIMITS.items():
        at_most(f"job.{key}", job[key], most)
    for key, ref in job.secrets.items():
        if (ref.name, ref.key) == (None, None):
            continue
        if not (ref.name and DNS1123_SUBDOMAIN.match(ref.name) and ref.key):
            raise JobConfigError(
                f"job.secrets.{key}",
                "needs {name: <Secret name (DNS-1123)>, "
                "key: <key in it>}; values are never put in config",
            )
