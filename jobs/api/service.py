"""What the API does, without HTTP: submit runs and sweeps through the CLI's own functions,
read runs from the shared snapshot, cancel, stream logs. Raises `ApiError(status, line)`."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hydra.errors import HydraException
from omegaconf import OmegaConf
from starlette.concurrency import run_in_threadpool

from jobs import submission
from jobs.api.auth import Identity
from jobs.api.follow import MAX_FOLLOWS_PER_CALLER, Follower, LogHub, TooManyFollowers
from jobs.api.models import (
    Run,
    RunRequest,
    Submitted,
    SweepRequest,
    labelled_overrides,
    labelled_sweep_overrides,
    override_value,
)
from jobs.api.records import relaunched, runs_named
from jobs.api.request_policy import MAX_SWEEP_POINTS, Refused, check_request
from jobs.api.snapshot import RunsSnapshot, RunView, to_run
from jobs.api.sweep_journal import NotRecorded, SweepJournal
from jobs.api.sweep_ledger import MAX_SWEEPS_PER_CALLER, SweepBusy, SweepLedger
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.backend import ClusterError, KubernetesBackend, PreflightError
from jobs.backends.kubernetes.faults import maybe_pause
from jobs.backends.kubernetes.run_status import MANAGED_SELECTOR, SWEEP_LABEL
from jobs.compose import compose
from jobs.naming import new_sweep_id, sweep_point_run_id
from jobs.spec import OWNER_LABEL
from jobs.submission import BadInput
from jobs.sweep import expand
from jobs.sweep_driver import Launched, PointError, PointRefused, Policy, SweepDriver
from jobs.sweep_points import point_label
from jobs.validate_inputs import input_paths


class ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = " ".join(detail.split())  # always one line


@dataclass(frozen=True)
class Checked:
    """A job that passed every check and may be submitted."""

    job: Any
    dry: Any
    plan: dict
    before: Any
    """The run's status before (None: a new run)."""


def _refuse_bad(check):
    try:
        return check()
    except Refused as err:
        raise ApiError(422, str(err)) from None


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def override_keys(overrides: list[str]) -> set[str]:
    return {_key(o) for o in overrides}


def private_values(cfg) -> list[str]:
    """The service's settings that error lines must not echo: its storage root and bucket,
    registry and account id, kubeconfig and context; longest first."""
    values = {
        OmegaConf.select(cfg, key, throw_on_missing=False)
        for key in (
            "storage.root",
            "job.image_repository",
            "job.image",
            "cluster.kubeconfig",
            "cluster.context",
        )
    }
    found = {v for v in values if isinstance(v, str) and len(v) >= 6}
    for value in list(found):
        if value.startswith("s3://"):
            found.add(value.removeprefix("s3://").split("/", 1)[0])  # the bucket
        found.update(re.findall(r"(?<!\d)\d{12}(?!\d)", value))  # AWS account ids
    for key in ("job.image_repository", "job.image"):
        image = OmegaConf.select(cfg, key, throw_on_missing=False)
        host = image.split("/", 1)[0] if isinstance(image, str) and "/" in image else ""
        if "." in host or ":" in host:
            found.add(host)  # the registry
    return sorted(found, key=len, reverse=True)


def _backend_error(err: BackendError) -> ApiError:
    if isinstance(err, PreflightError):
        return ApiError(422, str(err))  # this cluster cannot run the request; nothing created
    if isinstance(err, ClusterError):
        return ApiError(503, str(err))
    return ApiError(409, str(err))


SERVICE_SECTIONS = ("backend", "cluster")
"""Config sections a request can never change (checked on the composed config, too)."""
STACK_KEYS = ("storage.root", "job.image_repository", "job.queue")
"""Keys a request may set only while the service leaves them alone."""
REDACTED = "<service setting>"
_URL = re.compile(r"\bhttps?://[^\s'\"]+")


@dataclass
class Service:
    overrides: list[str] = field(default_factory=list)
    """The server's own overrides (stack, cluster.*): where jobs go. Requests cannot set them;
    they are applied after a request's, and the composed job is checked against them."""
    snapshot_ttl_s: float = 1.0
    max_follows_per_caller: int = MAX_FOLLOWS_PER_CALLER
    max_sweeps_per_caller: int = MAX_SWEEPS_PER_CALLER
    """Sweep submissions one user may have in flight (429 past it: jobs.api.sweep_ledger)."""
    """Log follows one user (all their tokens) may hold open at a time (429 past it)."""
    _hydra: threading.Lock = field(default_factory=threading.Lock)
    """Hydra's compose state is process-global: one composition at a time. Held for composing
    alone: the checks after it may wait on S3 or the Hub, and must not hold up other requests."""
    _users_lock: threading.Lock = field(default_factory=threading.Lock)
    _user_locks: dict[str, threading.Lock] = field(default_factory=dict)
    """user -> the lock their requests take before `_hydra` (`_composing`)."""

    def __post_init__(self) -> None:
        # Its eval scheduler submits `eval.every_checkpoint`'s Jobs (jobs.api.eval_scheduler).
        self.overrides = [*self.overrides, "backend=kubernetes", "backend.evals_scheduled=true"]
        with self._hydra:
            cfg = compose(self.overrides)
            # The API always checks images, Secrets and priorities; unset lists approve nothing
            # beyond the stack's repository.
            for key in ("approved_images", "approved_secrets", "approved_priorities"):
                if cfg.cluster[key] is None:
                    self.overrides.append(f"cluster.{key}=[]")
            self.cfg = compose(self.overrides)
            shipped = compose(["backend=kubernetes"])
        self._service_keys = override_keys(self.overrides) | {"job.owner"}
        self._stack_values = {}
        """The keys the service (its overrides or its stack) sets: a request cannot change them."""
        for key in STACK_KEYS:
            ours = OmegaConf.select(self.cfg, key, throw_on_missing=False)
            default = OmegaConf.select(shipped, key, throw_on_missing=False)
            if ours is not None and (key in self._service_keys or ours != default):
                self._stack_values[key] = ours
        # The service checks owners itself (admins may act on anyone's runs).
        self.backend = KubernetesBackend.from_config(self.cfg, check_owner=False)
        # Submissions run the preflight while checking (every point of a sweep before any is
        # submitted), so the submitting backend does not run it again. The two share one record
        # of what the service submitted, for its lifetime: `backend` forgets or never restarts
        # what `_submitter` scheduled.
        self._submitter = KubernetesBackend(
            self.backend.settings, preflight=False, submissions=self.backend.submissions
        )
        self._private = private_values(self.cfg)
        self.anonymous = Identity(self.cfg.job.owner or "local", admin=True)
        """Who `--no-auth` requests are: the user running the server, an admin."""
        self.snapshot = RunsSnapshot(self._list_jobs, ttl_s=self.snapshot_ttl_s)
        self.follows = LogHub(self._open_follow, self.max_follows_per_caller)
        self.sweeps = SweepLedger(self.max_sweeps_per_caller)
        self.journal = SweepJournal(self.backend)
        """Sweeps being submitted, on the cluster: a restart rolls back one a kill cut short."""

    @contextmanager
    def _composing(self, who: Identity) -> Iterator[None]:
        """The shared composition lock, reached through the user's own: each user has at
        most one request waiting for it, so another user's request waits for at most one
        composition per user ahead of it, however many requests one user sends."""
        with self._users_lock:
            turn = self._user_locks.setdefault(who.name, threading.Lock())
        with turn, self._hydra:
            yield

    def _list_jobs(self) -> list[dict]:
        return self.backend.job_objects(MANAGED_SELECTOR)

    def redact(self, line: str) -> str:
        """`line` without the service's own settings (bucket, registry, account, kubeconfig)."""
        for value in self._private:
            line = line.replace(value, REDACTED)
        # Endpoints (S3's, the Hub's) in a client library's error: the service's own.
        return _URL.sub(REDACTED, line)

    # -- writes --------------------------------------------------------------------------------
    def _composed(
        self, request_overrides: list[str], who: Identity, sweep_id: str | None = None
    ) -> list[str]:
        """The one place the service writes override strings: the request's (its typed fields
        through `to_overrides`), the sweep's id, then the service's (which win), then who
        asked; a sweep point's run id is `point_overrides`'."""
        swept = [] if sweep_id is None else [f"sweep_id={override_value(sweep_id)}"]
        return [
            *request_overrides,
            *swept,
            *self.overrides,
            f"job.owner={override_value(who.name)}",
        ]

    def submit_run(
        self, request: RunRequest, who: Identity, dryrun: bool = False
    ) -> tuple[int, Submitted]:
        labelled = labelled_overrides(request)
        overrides = [text for _, text in labelled]
        fields = request.model_dump(exclude={"overrides"})
        _refuse_bad(lambda: check_request(fields, labelled))
        self._refuse_service_keys(overrides)
        try:
            job = submission.prepare(
                self._composed(overrides, who), compose_lock=self._composing(who)
            )
        except BadInput as err:
            raise ApiError(err.http_status, str(err)) from err
        self._check_service_wins(job.cfg)
        job = self._relaunched(job, overrides, who)
        checked = self._check(job, who, resume=request.resume, dryrun=dryrun)
        if dryrun:
            return 200, Submitted(
                run_id=job.run_id, outcome="dryrun", plan=checked.plan, request=str(checked.dry)
            )
        return self._submit(checked)

    def submit_sweep(self, request: SweepRequest, who: Identity) -> tuple[str, list[Submitted]]:
        """The points through the sweep's one launch path (jobs.sweep_driver), all or nothing:
        every point prepared and checked before the first is submitted; one the cluster fails
        partway rolls back what this request created (`_roll_back`); a kill partway leaves the
        sweep's journal, and the next start rolls it back (jobs.api.sweep_journal)."""
        fields = request.model_dump(exclude={"overrides", "axes"})
        labelled = _refuse_bad(lambda: labelled_sweep_overrides(request))
        _refuse_bad(lambda: check_request(fields, labelled, sweep=True))
        requested = [text for _, text in labelled]
        self._refuse_service_keys(requested)
        now = submission.utc_now()
        sweep_id = request.sweep_id or new_sweep_id(now)
        overrides = self._composed(requested, who, sweep_id)
        again = self._answered_before(overrides, who)
        if again is not None:
            return sweep_id, again
        try:
            with self.sweeps.slot(who.name):
                results = self._run_sweep(overrides, sweep_id, who, now)
        except SweepBusy as err:
            raise ApiError(429, str(err)) from None
        self.sweeps.remember(overrides, results)
        return sweep_id, results

    def _answered_before(self, overrides: list[str], who: Identity) -> list[Submitted] | None:
        """The same sweep again (its exact overrides, who asked among them) while every run
        it submitted is still active and still theirs: the answer it had, each point
        `already active`, with nothing composed."""
        before = self.sweeps.recall(overrides)
        if before is None:
            return None
        views = self.views()
        for point in before:
            view = views.get(point.run_id)
            if view is None or view.status.finished or view.status.owner != who.name:
                return None
        return [p.model_copy(update={"outcome": "already active"}) for p in before]

    def _run_sweep(
        self, overrides: list[str], sweep_id: str, who: Identity, now: datetime
    ) -> list[Submitted]:
        submitted = 0

        def submit(checked: Checked) -> Submitted:
            nonlocal submitted
            result = self._submit(checked)[1]
            maybe_pause(f"sweep:after-point-{submitted}")
            submitted += 1
            return result

        driver = SweepDriver(
            prepare=lambda points: self._prepared(points, sweep_id, who, now),
            check=lambda job: self._check_point(job, who),
            submit=submit,
            policy=Policy.ALL_OR_NOTHING,
            roll_back=lambda submitted: self._roll_back(submitted, sweep_id, who),
        )
        try:
            with self._composing(who):
                points = expand(overrides, max_points=MAX_SWEEP_POINTS)
            numbered = list(enumerate(points))
            numbers = [index for index, _ in numbered]
            checked = driver.check_all(numbers, driver.prepare(numbered))
            launched: Launched = Launched([c.job for c in checked], [])
            creates = [c.job.run_id for c in checked if c.before is None or c.before.finished]
            self.journal.run(
                sweep_id,
                who.name,
                creates,
                submit=lambda: driver.submit_in_order(numbers, checked, launched),
                roll_back=lambda: self._roll_back(launched.results, sweep_id, who),
            )
            return launched.results
        except NotRecorded as err:
            raise ApiError(503, str(err)) from err
        except BackendError as err:
            raise _backend_error(err) from err
        except (HydraException, BadInput) as err:
            raise ApiError(BadInput.http_status, str(err).splitlines()[0]) from err
        except PointError as err:
            if isinstance(err.cause, ApiError):
                raise ApiError(err.cause.status, err.line(err.cause.detail)) from err.cause
            if isinstance(err, PointRefused):
                raise err.cause from None  # not a refusal: a fault, as anywhere else
            raise ApiError(500, err.line("failed")) from err.cause

    def _prepared(self, points, sweep_id: str, who: Identity, now: datetime) -> list:
        """Each point's job (`submission.prepare`, named by `point_overrides`), a point of an
        existing run held to the relaunch rule as a run request is; BadInput naming the first
        bad point with what the request set of it."""
        jobs = []
        for index, point in points:
            named = point_overrides(point, sweep_id, index)
            shown = [p for p in point if _key(p) not in self._service_keys]
            try:
                job = submission.prepare(named, now=now, compose_lock=self._composing(who))
                jobs.append(self._relaunched(job, shown, who))
            except BadInput as err:
                raise BadInput(f"{point_label(index, shown)}: {err}") from err
            except ApiError as err:
                if err.status != 422:
                    raise
                raise BadInput(f"{point_label(index, shown)}: {err.detail}") from err
        return jobs

    def _relaunched(self, job, request_overrides: list[str], who: Identity):
        """A request naming an existing run: the CLI's relaunch rule on the cluster's record
        of it (jobs.api.records `relaunched`); `job` as it is for a new run."""
        try:
            if self.backend.find(job.run_id) is None:
                return job
            composing = lambda: self._composing(who)  # noqa: E731
            return relaunched(job, request_overrides, self.backend.cluster, composing)
        except BackendError as err:
            raise _backend_error(err) from err
        except BadInput as err:
            raise ApiError(422, str(err)) from err

    def _check_point(self, job, who: Identity) -> Checked:
        self._check_service_wins(job.cfg)
        return self._check(job, who)

    def _roll_back(self, submitted: list[Submitted], sweep_id: str, who: Identity) -> list[str]:
        """Delete the jobs (their ConfigMaps go with them: owner references) this request
        created, and only those: the job must still be the one it created (uid), trainstack's,
        this user's and of this sweep. Returns the run ids left in place."""
        labels = {OWNER_LABEL: who.name, SWEEP_LABEL: sweep_id}
        left = []
        for point in submitted:
            if point.outcome == "already active":
                continue  # running before this request: not its to delete
            run_id = point.run_id
            uid = self.backend.forget(run_id)
            try:
                if self.backend.withdraw(run_id, uid, labels):
                    left.append(run_id)
                self.snapshot.refresh_run(run_id, self.backend.find)
            except BackendError:
                left.append(run_id)
        return left

    def _refuse_service_keys(self, overrides: list[str]) -> None:
        for key in override_keys(overrides):
            if key in self._service_keys or key in self._stack_values:
                raise ApiError(422, f"{key}: set by the service, not by a request")

    def _check_service_wins(self, cfg) -> None:
        for section in SERVICE_SECTIONS:
            if cfg[section] != self.cfg[section]:
                raise ApiError(422, f"{section}: set by the service, not by a request")
        for key, ours in self._stack_values.items():
            if OmegaConf.select(cfg, key) != ours:
                raise ApiError(422, f"{key}: set by the service, not by a request")
        if not self._root_allowed(cfg.storage.root):
            raise ApiError(
                422,
                "storage.root: outside the service's storage root; allowed: a directory under "
                "it, or s3://bucket/prefix inside the stack's grants (a service without them "
                "reads no bucket a request names)",
            )

    def _root_allowed(self, root: str) -> bool:
        """A storage root a request chose (the service pins none): s3://, or local under the
        service's own root. The API reads run dirs (metrics), so a request's local root would
        make it read wherever the request pointed on the API's host."""
        ours = self.cfg.storage.root
        if root == ours:
            return True
        if root.startswith("s3://"):
            # Only where the stack's grants confine it (validation checks the root against
            # them): without grants the service would read any bucket with its credentials.
            granted = bool(self.cfg.storage.grants.training)
            return granted and ".." not in root.split("/")
        if "://" in root or ours.startswith("s3://"):
            return False
        return Path(root).resolve().is_relative_to(Path(ours).resolve())

    def _check(self, job, who: Identity, resume: bool = True, dryrun: bool = False) -> Checked:
        """Everything short of writing: the request, the preflight, and the run id's owner."""
        backend = self.backend
        self._check_sweep_owner(job, who)
        self._check_input_owners(job, who)
        try:
            dry = backend.dryrun(job)
            checked = Checked(job, dry, job.plan.summary(), None)
            if dryrun:
                return checked
            existing = backend.find(job.run_id)
            backend.check_ours(job.run_id, existing)
            if backend.run_preflight:
                backend.preflight(job)
        except BackendError as err:
            raise _backend_error(err) from err
        if existing is None:
            return checked
        before = backend.status_of(existing)
        if before.owner != who.name and not who.admin:
            raise ApiError(
                403,
                f"run_id: run {job.run_id!r} belongs to {before.owner or 'nobody recorded'}; "
                "only its owner or an admin may resume it (pick a new run_id)",
            )
        if not resume:
            raise ApiError(
                409,
                f"run_id: run {job.run_id!r} exists ({before.state}); resume=false refuses "
                "to resume it (pick a new run_id, or resume=true)",
            )
        return Checked(job, dry, checked.plan, before)

    def _check_sweep_owner(self, job, who: Identity) -> None:
        """A sweep id is its first user's: nobody else adds runs to it, nor takes a run id
        its points use (`<sweep_id>-<n>`), or its owner's next resubmission would be 403."""
        if who.admin:
            return
        views = self.views()
        sweep_id = job.cfg.sweep_id
        base, _, point = job.run_id.rpartition("-")
        for name, yours in ((sweep_id, True), (base if point.isdigit() else None, False)):
            if not name:
                continue
            owners = {v.status.owner for v in views.values() if v.status.sweep_id == name}
            others = sorted(o or "nobody recorded" for o in owners if o != who.name)
            if others:
                key = "sweep_id" if yours else "run_id"
                raise ApiError(
                    403,
                    f"{key}: sweep {name!r} belongs to {others[0]}; only its owner adds runs "
                    "to it (pick another sweep_id or run_id)",
                )

    def _check_input_owners(self, job, who: Identity) -> None:
        """Every input path under the storage root (`trainer.resume_from`, `model.init_from`,
        the data and tokenizer: jobs.validate_inputs `input_paths`) reads a run's files (its
        checkpoints or exported weights, possibly trained on data only its owner may read):
        only the run's owner or an admin may name them, and only while the cluster lists the
        run (an unlisted run has nobody to attribute it to)."""
        if who.admin:
            return
        root = str(job.cfg.storage.root)
        for key, path, _ in input_paths(job.cfg):
            for run_id in runs_named(path, root):
                if run_id == job.run_id:
                    continue  # its own files (the run's owner is checked with the run id)
                view = self.views().get(run_id)
                owner = view.status.owner if view is not None else None
                if owner != who.name:
                    whose = f"belongs to {owner or 'nobody recorded'}" if view else "is not listed"
                    raise ApiError(
                        403,
                        f"{key}: run {run_id!r} {whose}; a run's files (checkpoints, exported "
                        "weights) are read only by its owner or an admin",
                    )

    def _submit(self, checked: Checked) -> tuple[int, Submitted]:
        job, plan, before = checked.job, checked.plan, checked.before
        backend = self._submitter
        try:
            backend.schedule(checked.dry)
            self.snapshot.refresh_run(job.run_id, self.backend.find)
        except BackendError as err:
            raise _backend_error(err) from err
        # Like `launch` without --wait, the service never auto-restarts what it scheduled (a log
        # follower would otherwise do so, once per replica).
        backend.never_restart(job.run_id)
        if before is None:
            return 201, Submitted(run_id=job.run_id, outcome="created", plan=plan)
        if before.finished:
            return 201, Submitted(run_id=job.run_id, outcome="resumed", plan=plan)
        return 200, Submitted(run_id=job.run_id, outcome="already active", plan=plan)

    def cancel(self, run_id: str, who: Identity) -> tuple[str, str]:
        view = self.view(run_id)
        if view.status.owner != who.name and not who.admin:
            raise ApiError(
                403,
                f"run {run_id!r} belongs to {view.status.owner or 'nobody recorded'}; only its "
                "owner or an admin may cancel it",
            )
        try:
            self.backend.cancel(run_id)
            self.snapshot.refresh_run(run_id, self.backend.find)
        except BackendError as err:
            raise _backend_error(err) from err
        status = view.status
        return status.state, (f"already {status.state}" if status.finished else "cancel requested")

    # -- reads ---------------------------------------------------------------------------------
    async def views_async(self) -> dict[str, RunView]:
        """`views()` for the event loop: from memory, or in a thread when it must wait."""
        if self.snapshot.must_wait():
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
        owner: str | None = None,
    ) -> list[Run]:
        now = datetime.now(UTC)
        return [
            to_run(v, now)
            for v in (self.views() if views is None else views).values()
            if (state is None or v.status.state == state)
            and (sweep is None or v.status.sweep_id == sweep)
            and (owner is None or v.status.owner == owner)
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


def point_overrides(point: list[str], sweep_id: str, index: int) -> list[str]:
    """A sweep point's overrides (from `expand`), named `<sweep_id>-<index>` as the CLI's."""
    return [*point, f"run_id={override_value(sweep_point_run_id(sweep_id, index))}"]


def log_error(err: BaseException) -> ApiError:
    """A log read's failure as a status: the cluster's is 503, a bad rank or pod 400."""
    if isinstance(err, ClusterError):
        return _backend_error(err)
    return ApiError(400, str(err) if isinstance(err, BackendError) else "log follow failed")
