"""The kubernetes backend: a job becomes a TrainJob or a PyTorchJob (`job.api`), with its
ConfigMap, on the cluster.

A thin adapter over `jobs.backends.kubernetes.client`: `dryrun` is the manifests as YAML; `schedule`
runs the preflight, pins ECR images to digests and submits idempotently; `status`/`list_runs` read
the job objects of both kinds (plus last step and loss from the run dir's metrics.jsonl, and a
TrainJob's JobSet restarts); `logs` reads or follows a rank's pod; `cancel` records the cancellation
and suspends the job (the operator deletes its pods, the trainer checkpoints on SIGTERM). A run is
looked up as the configured kind first, then as the other, so `status`, `logs` and `cancel` work for
runs submitted before a stack changed operator.

Auto-restart lives with whoever follows a run it scheduled (`--wait`, the sweep launcher's
wait mode): when the job ends Failed and was not cancelled, the same run id is resubmitted up
to `job.max_retries` times with exponential backoff, and resumes from its checkpoint
(jobs.backends.kubernetes.following). A job object's RunStatus is
jobs.backends.kubernetes.run_status's; where the backend submits and what the backends of one
owner share, jobs.backends.kubernetes.submitting's.

Its callers (the Training API among them) use this module, never the client: besides the
backend and its methods, the errors its calls raise (`ClusterError`: the cluster failed;
`PreflightError`, one of them: this cluster cannot run the job) and a log follow's handle
(`Cancellation`, and `FollowCancelled` when it was used) are named here.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from jobs.backend_registry import Shared
from jobs.backends import run_state
from jobs.backends.base import (
    QUEUED,
    SUCCEEDED,
    BackendError,
    DryRun,
    NoLogs,
    RunStatus,
)
from jobs.backends.kubernetes import eval_schedule, following
from jobs.backends.kubernetes.client import state as k8s_state
from jobs.backends.kubernetes.client.api import ClusterError, status_of
from jobs.backends.kubernetes.client.archived_logs import (
    ArchiveError,
    archived_log,
    archived_log_by_prefix,
    jobset_pod_prefix,
)
from jobs.backends.kubernetes.client.ecr import pin_images
from jobs.backends.kubernetes.client.kinds import (
    JOBSET_GROUP,
    JOBSET_VERSION,
    JOBSETS,
    KINDS,
    JobKind,
    kind_of,
)
from jobs.backends.kubernetes.client.kueue import (
    deactivate,
    is_queued,
    parse_quantity,
    queue_reason,
    workload_of,
)
from jobs.backends.kubernetes.client.ownership import (
    MANAGED_BY,
    MANAGER,
    ensure_ours,
    ensure_owned_by,
    labels_of,
)
from jobs.backends.kubernetes.client.preflight import NodeGroup, PreflightRequest, preflight
from jobs.backends.kubernetes.client.preflight import PreflightError as PreflightError
from jobs.backends.kubernetes.client.submit import ALREADY_ACTIVE, delete_job
from jobs.backends.kubernetes.client.watch import Cancellation as Cancellation
from jobs.backends.kubernetes.client.watch import FollowCancelled as FollowCancelled
from jobs.backends.kubernetes.client.watch import rank_pod, read_log, wait_for_end
from jobs.backends.kubernetes.manifests import to_yaml
from jobs.backends.kubernetes.run_status import MANAGED_SELECTOR, SWEEP_LABEL, deleted, to_status
from jobs.backends.kubernetes.runtimes import NODE
from jobs.backends.kubernetes.submitting import ClusterSettings, Submissions, submit_stamped
from jobs.materialize import MaterializedJob

WORKLOAD_WAIT_S = 10
"""How long `cancel` waits for Kueue to make a just-created job's Workload (it takes well under
a second) before deleting the job instead."""


class KubernetesBackend:
    name = "kubernetes"
    restart_backoff_s = 30.0
    """Sleep before the first automatic resubmission; doubles per retry (capped at 15 min)."""

    def __init__(
        self,
        settings: ClusterSettings,
        preflight: bool = True,
        user: str | None = None,
        check_owner: bool = False,
        submissions: Submissions | None = None,
    ):
        self.settings = settings
        self.submissions = submissions if submissions is not None else Submissions()
        """Shared with the other backends its owner made (see Submissions); its own if none."""
        self.run_preflight = preflight
        self.user = user
        """Who acts (job.owner): with `check_owner`, only runs labelled with this owner are
        resubmitted or cancelled."""
        self.check_owner = check_owner
        self._cluster = None

    @classmethod
    def from_config(
        cls, cfg: Any, check_owner: bool | None = None, shared: Shared | None = None
    ) -> KubernetesBackend:
        """`check_owner`: None reads it from `backend.others_runs` (the CLI's `--force`).
        `shared`: what the backends its owner makes share (jobs.backend_registry.Shared); this
        backend's part is a Submissions."""

        cluster = cfg.cluster
        groups = tuple(
            NodeGroup(g.name, g.instance_type, int(g.max_size)) for g in cluster.node_groups
        )
        settings = ClusterSettings(
            cluster.kubeconfig,
            cluster.context,
            cluster.namespace,
            groups,
            cfg.job.api,
            region=cluster.region,
            log_group=cluster.log_group,
        )
        if check_owner is None:
            check_owner = not cfg.backend.others_runs
        return cls(
            settings,
            preflight=bool(cfg.backend.preflight),
            user=cfg.job.owner,
            check_owner=check_owner,
            submissions=shared.part(cls.name, Submissions) if shared is not None else None,
        )

    @property
    def cluster(self):
        if self._cluster is None:
            settings = self.settings
            self._cluster = self.submissions.connection(
                settings.kubeconfig, settings.context, settings.namespace
            )
        return self._cluster

    # -- the backend verbs ---------------------------------------------------------------------
    def dryrun(self, job: MaterializedJob) -> DryRun:
        if job.manifests is None:
            raise BackendError(f"{job.run_id}: no manifests were materialized for kubernetes")
        text = (
            f"# namespace {self.settings.namespace}; ECR image tags are pinned to their digest "
            "at submit\n" + to_yaml(job.manifests)
        )
        return DryRun(backend=self.name, job=job, request=job.manifests, text=text)

    def schedule(self, dryrun: DryRun) -> str:
        job: MaterializedJob = dryrun.job
        if self.check_owner:
            existing = self.find(job.run_id)
            self.check_ours(job.run_id, existing)
            ensure_owned_by("resubmit", job.run_id, existing, self.user)
        if self.run_preflight:
            self.preflight(job)
        job.store_code()  # the pods fetch it from the run dir: there before they start
        evals = eval_schedule.plan_for(job.cfg, job.run_id, job.spec.run_dir)
        manifests = pin_images(dryrun.request)
        if evals is not None:  # for the Training API's scheduler, which follows no one
            eval_schedule.annotate(manifests, evals)
        submission = submit_stamped(self.cluster, manifests)
        if submission.outcome != ALREADY_ACTIVE:  # a run this process did not submit: not ours
            uid = submission.job["metadata"]["uid"]
            self.submissions.record(job.run_id, manifests, int(job.cfg.job.max_retries), uid)
        self.submissions.kinds[job.run_id] = kind_of(submission.job)
        if evals is not None:
            self.submissions.evals[job.run_id] = evals
        print(f"{job.run_id}: {submission.outcome} in namespace {self.settings.namespace}")
        return job.run_id

    def preflight(self, job: MaterializedJob) -> None:
        spec, kube = job.spec, job.kubernetes
        resources = spec.resources

        request = PreflightRequest(
            service_account=kube.service_account,
            instance_type=spec.instance_type,
            nodes=spec.nodes,
            gpus_per_node=resources.gpus if resources else 0,
            efa_per_node=resources.efa if resources else 0,
            node_groups=self.settings.node_groups,
            queue=job.cfg.job.queue,
            cpu_per_node=parse_quantity(resources.cpu) if resources else 0,
            memory_per_node=parse_quantity(resources.memory) if resources else 0,
            kind=KINDS[kube.api],
            runtime=kube.runtime,
        )
        for warning in preflight(self.cluster, request):
            print(f"{job.run_id}: preflight warning: {warning}", file=sys.stderr)

    def find(self, run_id: str) -> dict | None:
        """The run's job object, of whichever kind it is (the configured one first)."""
        known = self.submissions.kinds.get(run_id)
        kinds = self.settings.kinds
        for kind in (known, *(k for k in kinds if k is not known)) if known else kinds:
            try:
                job = self.cluster.get_job(run_id, kind)
            except ClusterError as err:
                if not self._not_ours_to_read(kind, err):
                    raise
                continue
            if job is not None:
                self.submissions.kinds[run_id] = kind
                return job
        return None

    def _not_ours_to_read(self, kind: JobKind, err: ClusterError) -> bool:
        """`err` is a refusal (403) to read `kind`, which is not the configured kind: one the
        stack did not install, so its Role names only the others (`trainstack:rayJobs`)."""
        return kind is not self.settings.kinds[0] and status_of(err.__cause__) == 403

    def kind(self, run_id: str) -> JobKind:
        return self.submissions.kinds.get(run_id) or self.settings.kinds[0]

    def status(self, run_id: str) -> RunStatus:
        job = self.find(run_id)
        if job is None:
            raise BackendError(
                f"no run {run_id!r} in namespace {self.settings.namespace} on the cluster"
            )
        status = self.status_of(job)
        restarts = self._jobset_restarts(job)
        if restarts:
            note = f"JobSet restarts: {restarts}"
            status = replace(status, message=f"{status.message}; {note}".lstrip("; "))
        return status

    def _jobset_restarts(self, job: dict) -> int:
        """How often a TrainJob's JobSet recreated its pods (its failure policy); 0 for a
        PyTorchJob, or when the JobSet is gone or may not be read."""

        if not kind_of(job).runs_on_jobset:
            return 0
        name = job["metadata"]["name"]
        try:
            jobset = self.cluster.call(
                f"get JobSet {self.settings.namespace}/{name}",
                self.cluster.custom.get_namespaced_custom_object,
                JOBSET_GROUP,
                JOBSET_VERSION,
                self.settings.namespace,
                JOBSETS,
                name,
                expect=(403, 404),
            )
        except Exception as exc:
            if status_of(exc) in (403, 404):
                return 0
            raise
        return int(((jobset or {}).get("status") or {}).get("restarts") or 0)

    def status_of(self, job: dict) -> RunStatus:
        """The RunStatus of a job object as the cluster returned it: to_status, plus Kueue's
        reason for a queued job."""

        status = to_status(job)
        if status.state == QUEUED:
            status = replace(status, message=queue_reason(workload_of(self.cluster, job)))
        return status

    def list_runs(self, sweep_id: str | None = None, state: str | None = None) -> list[RunStatus]:
        """The runs; those past their time to live are deleted on the way (`k8s_state.expired`:
        cancelled ones, which the operator's TTL never counts as finished, and finished
        TrainJobs, which nothing else deletes)."""

        selector = MANAGED_SELECTOR + (f",{SWEEP_LABEL}={sweep_id}" if sweep_id else "")
        now = datetime.now(UTC)
        runs = []
        for job in self.job_objects(selector):
            if k8s_state.expired(job, now):
                delete_job(self.cluster, job["metadata"]["name"], wait=False, kind=kind_of(job))
                continue
            runs.append(self.status_of(job))
        return [r for r in runs if state is None or r.state == state]

    def job_objects(self, selector: str) -> list[dict]:
        """Every job object of every kind matching `selector` (the configured kind first). A
        kind the cluster does not serve (404: its operator is not installed) has none, and so
        has another kind than the configured one that we may not list (403: the stack did not
        install it, so the Training API's Role does not name it: `trainstack:rayJobs`); when
        it serves none, the configured kind's error is raised."""

        jobs: list[dict] = []
        unserved: list[ClusterError] = []
        for kind in self.settings.kinds:
            try:
                jobs += self.cluster.list_jobs(selector, kind)
            except ClusterError as err:
                if status_of(err.__cause__) != 404 and not self._not_ours_to_read(kind, err):
                    raise
                unserved.append(err)
        if len(unserved) == len(self.settings.kinds):
            raise unserved[0]
        return jobs

    def logs(self, run_id: str, rank: int = 0, follow: bool = False, cancel=None) -> Iterator[str]:
        """A rank's log. Following a run this backend scheduled also restarts it on failure (see the
        module docstring) and reports state changes as `[trainstack]` lines. `cancel`
        (jobs.backends.kubernetes.client.watch.Cancellation) set from another thread ends a
        follow."""

        job = self.find(run_id)
        if job is None:
            if follow:
                raise BackendError(f"no run {run_id!r} in namespace {self.settings.namespace}")
            yield from self.archived_logs(run_id, rank)  # the job (and its pods) expired
            return
        try:
            k8s_state.check_rank(job, rank)
        except ValueError as err:
            raise BackendError(f"{run_id}: {err}") from None
        kind = kind_of(job)
        if not follow:
            pod = rank_pod(self.cluster, job, rank)
            lines = (
                None
                if pod is None
                else read_log(self.cluster, pod["metadata"]["name"], kind.log_container)
            )
            if lines is not None:
                yield from lines
            else:
                yield from self.archived_logs(run_id, rank, kind)
            return
        evals = self._evals(run_id)
        try:
            final = yield from self._follow(run_id, rank, cancel, evals)
        finally:
            if evals is not None:
                evals.stop()
        if evals is not None:
            yield from evals.end(final.state == SUCCEEDED)

    def _follow(
        self, run_id: str, rank: int, cancel, evals: eval_schedule.EvalFollow | None
    ) -> Generator[str, None, RunStatus]:
        while True:
            outcome: list[RunStatus] = []
            for line in following.follow(
                self.cluster, run_id, rank, self.kind(run_id), outcome, cancel
            ):
                yield line
                if evals is not None:
                    yield from evals.pending()
            final = outcome[0]
            if final.message:
                yield f"[trainstack] {run_id}: {final.message}"
            if not following.restart_due(self.submissions, run_id, final):
                return final
            if not (yield from self._restart(run_id, final.retries)):
                return final

    def archived_logs(self, run_id: str, rank: int, kind: JobKind | None = None) -> list[str]:
        """The rank's log from CloudWatch Logs once its pod is gone. A PyTorchJob's rank is a
        named pod (JobKind.gone_pod: rank 0 master-0, rank N worker-(N-1)); a TrainJob's is
        the newest of its JobSet pods' streams; a RayJob's, its submitter pods'. A run whose
        job is gone too is looked for as every kind, the configured one first."""

        group, region = self.settings.log_group, self.settings.region
        found = None
        for each in ((kind,) if kind else self.settings.kinds) if group else ():
            try:
                if not each.log_ranks:  # its submitter's newest pod: `<run id>-<random>`
                    prefix = f"{run_id}-"
                    found = archived_log_by_prefix(region, group, prefix, each.log_container)
                elif not each.runs_on_jobset:
                    found = archived_log(region, group, each.gone_pod(run_id, rank), each.container)
                else:
                    prefix = jobset_pod_prefix(run_id, NODE, rank)
                    found = archived_log_by_prefix(region, group, prefix, each.container)
            except ArchiveError as err:
                raise BackendError(f"{run_id}: rank {rank} has no pod and {err}") from None
            if found is not None:
                break
        if found is None:
            where = f"log group {group}" if group else "no cluster.log_group set"
            raise NoLogs(f"{run_id}: rank {rank} has no pod and no archived log ({where})")
        newest = f" (the newest of rank {rank}'s {found.streams})" if found.streams > 1 else ""
        print(
            f"{run_id}: pod {found.pod} is gone; reading its archived log from {group}{newest}",
            file=sys.stderr,
        )
        return found.lines

    def cancel(self, run_id: str) -> None:
        """Idempotent. An active run is marked cancelled and suspended; a Failed one is only
        marked, so that whoever follows it does not restart it. Unknown, succeeded and
        already cancelled runs are left as they are.

        Under Kueue (job.queue) a suspend alone is undone (Kueue un-suspends a job whose
        Workload is admitted, or admits a waiting one later), so its Workload is deactivated:
        Kueue stops the pods, releases the quota and never admits it again
        (jobs.backends.kubernetes.client.kueue).
        Where no Workload can be deactivated (none yet after a short wait, or no right to),
        the job is deleted instead: it can't start, and its run dir stays."""

        job = self.find(run_id)
        self.check_ours(run_id, job)
        if self.check_owner:
            ensure_owned_by("cancel", run_id, job, self.user)
        if job is None or k8s_state.job_state(job) in ("Succeeded", "Cancelled"):
            return
        kind = kind_of(job)
        now = run_state.utc_now()
        patch: dict[str, Any] = {"metadata": {"annotations": {k8s_state.CANCELLED_ANNOTATION: now}}}
        active = not k8s_state.is_final(k8s_state.job_state(job))
        if active:
            patch |= kind.suspend_patch()
        self.cluster.patch_job(run_id, patch, kind)
        if active and is_queued(job) and not self._deactivate_workload(job):
            delete_job(self.cluster, run_id, wait=False, kind=kind)

    def _deactivate_workload(self, job: dict) -> bool:
        """Deactivate the job's Kueue Workload, waiting up to WORKLOAD_WAIT_S for Kueue to
        make one (a job just created); False when there is none or it may not be changed."""

        for attempt in range(WORKLOAD_WAIT_S + 1):
            workload = workload_of(self.cluster, job)
            if workload is not None:
                return deactivate(self.cluster, workload)
            if attempt < WORKLOAD_WAIT_S:
                self.cluster.sleep(1.0)
        return False

    def check_ours(self, run_id: str, job: dict | None) -> None:
        """NotOurs (a BackendError) when `job`, `run_id`'s job object as `find` returned it
        (None: there is none), is not trainstack's (no managed-by label): nothing trainstack
        did not make is changed."""
        if job is not None:
            ensure_ours(kind_of(job).kind, self.settings.namespace, run_id, job)

    def withdraw(self, run_id: str, uid: str | None, labels: dict[str, str]) -> bool:
        """Undo a submission made here (a caller rolling back its own request): delete
        `run_id`'s job, not waiting (its ConfigMap goes with it: owner references), only when
        it is still the one created then (`uid`, as `forget` returned it), trainstack's and
        carries every one of `labels`. Returns whether a job of that name is left in place
        (another's, or resubmitted since); BackendError when the cluster cannot say."""
        job = self.find(run_id)
        if job is None:
            return False
        found = labels_of(job)
        if (
            uid is None
            or job["metadata"].get("uid") != uid
            or found.get(MANAGED_BY) != MANAGER
            or any(found.get(key) != value for key, value in labels.items())
        ):
            return True
        delete_job(self.cluster, run_id, wait=False, kind=kind_of(job))
        return False

    def forget(self, run_id: str) -> str | None:
        """Treat `run_id` as not submitted by this process: nothing here restarts it. Returns
        the uid of the job this process created for it (None: none), for a caller that undoes
        its own submission."""
        self.submissions.scheduled.pop(run_id, None)
        return self.submissions.uids.pop(run_id, None)

    def never_restart(self, run_id: str) -> None:
        """Like `launch` without --wait: whoever follows `run_id` in this process does not
        restart it (the uid stays known, for `forget`)."""
        self.submissions.scheduled.pop(run_id, None)

    # -- following and restarting --------------------------------------------------------------
    def wait(self, run_id: str, on_line=print) -> RunStatus:
        """Block until the run ends, restarting it on failure if it was scheduled here;
        state changes and restarts go to `on_line` as `[trainstack]` lines."""

        if run_id not in self.submissions.kinds:
            self.find(run_id)
        evals = self._evals(run_id, on_line)
        try:
            final = self._wait(run_id, on_line)
        finally:
            if evals is not None:
                evals.stop()
        if evals is not None:
            for line in evals.end(final.state == SUCCEEDED):
                on_line(line)
        return final

    def _evals(self, run_id: str, on_line=None) -> eval_schedule.EvalFollow | None:
        """eval.every_checkpoint: its eval Jobs submitted while the run is followed, the rest
        once it succeeded (jobs.backends.kubernetes.eval_schedule)."""
        plan = self.submissions.evals.get(run_id)
        return None if plan is None else eval_schedule.EvalFollow(self.cluster, plan, on_line)

    def _wait(self, run_id: str, on_line) -> RunStatus:
        kind = self.kind(run_id)
        while True:
            job = wait_for_end(
                self.cluster,
                run_id,
                on_state=lambda state, _: on_line(f"[trainstack] {run_id}: {state}"),
                kind=kind,
            )
            final = to_status(job) if job else deleted(run_id, kind)
            if not following.restart_due(self.submissions, run_id, final):
                return final
            if not following.drain(self._restart(run_id, final.retries), on_line):
                return final

    def _restart(self, run_id: str, retries_so_far: int) -> Generator[str, None, bool]:
        """jobs.backends.kubernetes.following.restart, with this backend's backoff."""
        return following.restart(
            self.cluster,
            self.submissions,
            run_id,
            self.kind(run_id),
            retries_so_far,
            self.restart_backoff_s,
        )


BACKEND = KubernetesBackend
