"""Where the kubernetes backend submits (ClusterSettings), what the backends of one owner
remember of the runs they submitted (Submissions: the ones they may restart, and their
cluster connections), and the submission itself: each submit, the first and every automatic
resubmission, stamps the job with its own time before it goes (`submit_stamped`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobs import submission as submissions
from jobs.backends.kubernetes.client.api import connect
from jobs.backends.kubernetes.client.kinds import BY_KIND, KINDS, JobKind
from jobs.backends.kubernetes.client.submit import Submission, submit
from jobs.backends.kubernetes.manifests import CREATED_AT


@dataclass(frozen=True)
class ClusterSettings:
    kubeconfig: str | None
    context: str | None
    namespace: str
    node_groups: tuple[Any, ...] = ()
    """jobs.backends.kubernetes.client.preflight.NodeGroup entries from cluster.node_groups."""
    job_api: str = "trainjob"
    """`job.api`: the kind looked up first."""
    region: str | None = None
    log_group: str | None = None
    """CloudWatch Logs group holding container logs after pods go (cluster.log_group)."""

    @property
    def kinds(self) -> tuple[JobKind, ...]:
        """The job kinds the cluster side follows (JobKind.followed), the configured one
        first."""
        first = KINDS[self.job_api]
        return (first, *(k for k in KINDS.values() if k is not first and k.followed))


def stamped(manifests: list[dict], now: datetime) -> list[dict]:
    """`manifests` with the submit time on the job (renders carry none: the same config
    renders the same bytes), and on its pod templates too where its kind has them (a
    PyTorchJob's, JobKind.pod_templates): its pods read it as their submission
    (SUBMISSION_ENV), and count their starts per submission (trainer.pod_starts)."""
    created_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for manifest in manifests:
        kind = BY_KIND.get(manifest.get("kind", ""))
        if kind is None:
            continue
        manifest["metadata"].setdefault("annotations", {})[CREATED_AT] = created_at
        for template in kind.pod_templates(manifest):
            metadata = template.setdefault("metadata", {})
            metadata.setdefault("annotations", {})[CREATED_AT] = created_at
    return manifests


def submit_stamped(cluster: Any, manifests: list[dict], *, retries: int = 0) -> Submission:
    """Stamp `manifests` (in place) with the submission's one clock (run ids use it too, so a
    caller can fix it: jobs.submission.utc_now) and submit them: a new submission, a new
    created-at, so the pods count their starts from 0 again."""
    stamped(manifests, submissions.utc_now())
    return submit(cluster, manifests, retries=retries)


@dataclass
class Submissions:
    """What the kubernetes backends that work together share: the runs they submitted (the
    ones they may restart), the kind each run was found as, and their cluster connections.

    Owned by whoever makes those backends, never by a class: the launch (jobs.app.LaunchTask,
    through `jobs.backend_registry.Shared`), whose points one backend schedules and another
    follows (the kubernetes launcher's wait mode restarts them); the Training API's service for
    its lifetime (its submitting backend schedules, its reading one forgets or never restarts).
    A backend made without one keeps its own, so two owners never see each other's runs."""

    scheduled: dict[str, tuple[list[dict], int]] = field(default_factory=dict)
    """run id -> (manifests as submitted, job.max_retries) of the runs submitted here: the ones
    that may be restarted."""
    uids: dict[str, str] = field(default_factory=dict)
    """run id -> uid of the job created or adopted here for it: a job of the same name with
    another uid (someone resubmitted the run) is not ours to restart."""
    kinds: dict[str, JobKind] = field(default_factory=dict)
    """run id -> the kind it was found or submitted as (saves looking up the other kind)."""
    evals: dict[str, Any] = field(default_factory=dict)
    """run id -> its eval_schedule.EvalPlan (`eval.every_checkpoint`): what following it
    submits for each committed checkpoint."""
    connections: dict[tuple[str | None, str | None, str], Any] = field(default_factory=dict)
    """(kubeconfig, context, namespace) -> jobs.backends.kubernetes.client.api.Cluster: loading
    a kubeconfig may run its credential plugin (EKS: `aws eks get-token`), and a sweep makes
    several backends per point. Expired tokens are refreshed by the client."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, run_id: str, manifests: list[dict], max_retries: int, uid: str) -> None:
        """`run_id` was submitted here as `manifests` (job uid `uid`): it may be restarted up
        to `max_retries` times."""
        self.scheduled[run_id] = (manifests, max_retries)
        self.uids[run_id] = uid

    def connection(self, kubeconfig: str | None, context: str | None, namespace: str) -> Any:
        """The one Cluster for these settings, connected on first use (one connect even when
        a sweep's followers ask at once)."""
        key = (kubeconfig, context, namespace)
        with self._lock:
            if key not in self.connections:
                self.connections[key] = connect(*key)
            return self.connections[key]
