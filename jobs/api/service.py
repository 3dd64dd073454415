"""What the API does, without HTTP: submit runs and sweeps through the CLI's own functions,
read runs from the shared snapshot, cancel, stream logs. Raises `ApiError(status, line)`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from jobs.api.follow import MAX_FOLLOWS_PER_CALLER, Follower, LogHub, TooManyFollowers
from jobs.api.models import Run, RunRequest, Submitted, SweepRequest, refused_key, to_overrides
from jobs.api.snapshot import RunsSnapshot, RunView
from jobs.backends.base import BackendError


class ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = " ".join(detail.split())  # always one line


def _backend_error(err: BackendError) -> ApiError:
    from jobs.k8s.api import ClusterError
    from jobs.k8s.preflight import PreflightError

    if isinstance(err, PreflightError):
        return ApiError(422, str(err))  # this cluster cannot run the request; nothing created
    if isinstance(err, ClusterError):
        return ApiError(503, str(err))
    return ApiError(409, str(err))


@dataclass
class Service:
    overrides: list[str] = field(default_factory=list)
    """The server's own overrides (stack, cluster.*): where jobs go. Requests cannot set them."""
    snapshot_ttl_s: float = 1.0
    max_follows_per_caller: int = MAX_FOLLOWS_PER_CALLER
    """Log follows one token may hold open at a time (429 past it)."""
    _hydra: threading.Lock = field(default_factory=threading.Lock)
    """Hydra's compose state is process-global: one composition at a time."""

    def __post_init__(self) -> None:
        self.overrides = [*self.overrides, "backend=kubernetes"]
        with self._hydra:
            from jobs.backends import backend_for
            from jobs.compose import compose

            self.backend = backend_for(compose(self.overrides))
        self.snapshot = RunsSnapshot(self._list_jobs, ttl_s=self.snapshot_ttl_s)
        self.follows = LogHub(self._open_follow, self.max_follows_per_caller)

    def _list_jobs(self) -> list[dict]:
        from jobs.backends.kubernetes import MANAGED_SELECTOR

        return self.backend.cluster.list_jobs(MANAGED_SELECTOR)

    # -- writes --------------------------------------------------------------------------------
    def submit_run(self, request: RunRequest, dryrun: bool = False) -> tuple[int, Submitted]:
        from jobs.submission import BadInput, prepare

        overrides = to_overrides(request)
        refused = refused_key(overrides)
        if refused:
            raise ApiError(422, refused)
        try:
            with self._hydra:
                job = prepare([*self.overrides, *overrides])
        except BadInput as err:
            raise ApiError(422, str(err)) from err
        return self._schedule(job, dryrun=dryrun, resume=request.resume)

    def submit_sweep(self, request: SweepRequest) -> tuple[str, list[Submitted]]:
        from hydra.errors import HydraException

        from jobs.naming import new_sweep_id, sweep_point_run_id
        from jobs.submission import BadInput, prepare, utc_now
        from jobs.sweep import expand

        refused = refused_key(request.overrides)
        if refused:
            raise ApiError(422, refused)
        now = utc_now()
        sweep_id = request.sweep_id or new_sweep_id(now)
        overrides = [*self.overrides, *request.overrides, f"sweep_id={sweep_id}"]
        jobs = []
        try:
            with self._hydra:
                points = expand(overrides)
                for index, point in enumerate(points):
                    run_id = f"run_id={sweep_point_run_id(sweep_id, index)}"
                    try:
                        jobs.append(prepare([*point, run_id], now=now))
                    except BadInput as err:
                        raise BadInput(f"sweep point {index} ({' '.join(point)}): {err}") from err
        except (HydraException, BadInput) as err:
            raise ApiError(422, str(err).splitlines()[0]) from err
        # Every point is valid before the first is submitted (the CLI's all-or-nothing rule).
        return sweep_id, [self._schedule(job)[1] for job in jobs]

    def _schedule(self, job, dryrun: bool = False, resume: bool = True) -> tuple[int, Submitted]:
        from jobs.backends import backend_for

        backend = backend_for(job.cfg)
        plan = job.plan.summary()
        try:
            request = backend.dryrun(job)
            if dryrun:
                return 200, Submitted(
                    run_id=job.run_id, outcome="dryrun", plan=plan, request=str(request)
                )
            before = _status_or_none(backend, job.run_id)
            if before is not None and not resume:
                raise ApiError(
                    409,
                    f"run_id: run {job.run_id!r} exists ({before.state}); resume=false refuses "
                    "to resume it (pick a new run_id, or resume=true)",
                )
            backend.schedule(request)
            self.snapshot.refresh_run(job.run_id, self.backend.cluster.get_job)
        except BackendError as err:
            raise _backend_error(err) from err
        # Like `launch` without --wait, the service never auto-restarts what it scheduled (a log
        # follower would otherwise do so, once per replica).
        type(backend)._scheduled.pop(job.run_id, None)
        if before is None:
            return 201, Submitted(run_id=job.run_id, outcome="created", plan=plan)
        if before.finished:
            return 201, Submitted(run_id=job.run_id, outcome="resumed", plan=plan)
        return 200, Submitted(run_id=job.run_id, outcome="already active", plan=plan)

    def cancel(self, run_id: str) -> tuple[str, str]:
        view = self.view(run_id)
        try:
            self.backend.cancel(run_id)
            self.snapshot.refresh_run(run_id, self.backend.cluster.get_job)
        except BackendError as err:
            raise _backend_error(err) from err
        status = view.status
        return status.state, (f"already {status.state}" if status.finished else "cancel requested")

    # -- reads ---------------------------------------------------------------------------------
    async def views_async(self) -> dict[str, RunView]:
        """`views()` for the event loop: from memory, or in a thread when it must wait."""
        if self.snapshot.must_wait():
            from starlette.concurrency import run_in_threadpool

            return await run_in_threadpool(self.views)
        return self.views()

    def views(self) -> dict[str, RunView]:
        try:
            return self.snapshot.runs()
        except BackendError as err:
            raise _backend_error(err) from err

    def view(self, run_id: str, views: dict[str, RunView] | None = None) -> RunView:
        found = (self.views() if views is None else views).get(run_id)
        if found is None:
            raise ApiError(404, f"run {run_id!r}: no such run in namespace {self.namespace}")
        return found

    @property
    def namespace(self) -> str:
        return self.backend.settings.namespace

    def runs(
        self,
        state: str | None = None,
        sweep: str | None = None,
        views: dict[str, RunView] | None = None,
    ) -> list[Run]:
        now = datetime.now(UTC)
        return [
            to_run(v, now)
            for v in (self.views() if views is None else views).values()
            if (state is None or v.status.state == state)
            and (sweep is None or v.status.sweep_id == sweep)
        ]

    def logs(self, run_id: str, rank: int) -> list[str]:
        """The rank's log so far."""
        self.view(run_id)
        try:
            return list(self.backend.logs(run_id, rank=rank))
        except BackendError as err:
            raise log_error(err) from err

    def follow(self, run_id: str, rank: int, caller: str) -> Follower:
        """A place among the followers of (run, rank) (call from the event loop); its first
        item is the upstream's first line, END or the error (`log_error` makes it a status)."""
        try:
            return self.follows.join(run_id, rank, caller)
        except TooManyFollowers as err:
            raise ApiError(429, str(err)) from err

    def _open_follow(self, run_id: str, rank: int, cancel) -> Iterator[str]:
        return self.backend.logs(run_id, rank=rank, follow=True, cancel=cancel)


def log_error(err: BaseException) -> ApiError:
    """A log read's failure as a status: the cluster's is 503, a bad rank or pod 400."""
    from jobs.k8s.api import ClusterError

    if isinstance(err, ClusterError):
        return _backend_error(err)
    return ApiError(400, str(err) if isinstance(err, BackendError) else "log follow failed")


def _status_or_none(backend, run_id: str):
    try:
        return backend.status(run_id)
    except BackendError as err:
        from jobs.k8s.api import ClusterError

        if isinstance(err, ClusterError):
            raise
        return None


def to_run(view: RunView, now: datetime) -> Run:
    s = view.status
    progress = None
    if view.max_steps and s.last_step is not None:
        progress = round(min(1.0, s.last_step / view.max_steps), 4)
    return Run(
        run_id=s.run_id,
        state=s.state,
        sweep_id=s.sweep_id,
        nodes=s.nodes,
        retries=s.retries,
        started_at=s.started_at,
        finished_at=s.finished_at,
        last_step=s.last_step,
        last_loss=s.last_loss,
        max_steps=view.max_steps,
        progress=progress,
        instance_type=view.instance_type,
        hourly_usd=view.hourly_usd,
        cost_so_far_usd=view.cost_so_far(now),
        run_dir=s.run_dir,
        message=s.message,
    )
