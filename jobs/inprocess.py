"""The CLI's launch path and run lookups, run in the caller's process for the Python API
(trainstack/), raising jobs.errors' classes instead of printing and exiting.

A launch is what `trainstack launch` does for one run (jobs.app.run_single): compose, the
run's own record for an existing run id (jobs.relaunch), validate and materialize, then the
backend's `dryrun` and `schedule`. Its flags become the overrides the CLI turns them into
(jobs.commands.launch.split_args). A sweep is the Training API's (jobs/api/service.py
`submit_sweep`): every point prepared and checked before the first is submitted, all or
nothing (jobs.sweep_driver), its points named `<sweep_id>-<n>` as the CLI names them. Runs
are found as `trainstack status` finds them (jobs.commands.run_lookup).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from jobs import backend_registry as backends
from jobs import submission
from jobs.api.overrides import Scalar, axis_overrides, override_value
from jobs.api.request_policy import KEY, Refused
from jobs.backends.base import BackendError, DryRun, RunStatus
from jobs.commands.launch import split_args
from jobs.commands.run_lookup import backends_for, existing_run_dir, find_run
from jobs.compose import compose
from jobs.errors import ConfigError, RunNotFound, SubmitError, one_line
from jobs.materialize import MaterializedJob, materialize
from jobs.naming import new_sweep_id, sweep_point_run_id
from jobs.plot.metrics import KEPT_ROWS, MetricsFile
from jobs.relaunch import read_record, relaunch_config
from jobs.sweep import expand
from jobs.sweep_driver import PointError, Policy, SweepDriver
from trainer.checkpoint import list_checkpoints
from trainer.errors import ConfigError as TrainerConfigError
from trainer.storage import StorageError, open_run_storage

HYDRA = threading.Lock()
"""Hydra's compose state is process-global: one composition at a time in this process."""
METRICS_PAGE = 1000
"""Records read per page of metrics.jsonl (the API's page; the file keeps KEPT_ROWS)."""


def valued(values: Mapping[str, Scalar] | None) -> list[str]:
    """`{"trainer.lr": 3e-4}` as overrides, each value quoted as data the way the Training
    API quotes a request's (`override_value`): a string is never read as grammar."""
    out = []
    for key, value in (values or {}).items():
        if not isinstance(key, str) or not KEY.match(key):
            raise ConfigError(
                f"values: {key!r} is not a config key; allowed: a dotted key (letters, "
                "digits, _ and . only, e.g. trainer.lr)"
            )
        if value is not None and not isinstance(value, str | int | float | bool):
            raise ConfigError(
                f"{key}: {type(value).__name__} is not a value; allowed: a string, number, "
                "bool or None (a list or section as an override string)",
                key=key,
            )
        out.append(f"{key}={override_value(value)}")
    return out


def launch_overrides(
    overrides: Sequence[str],
    values: Mapping[str, Scalar] | None = None,
    *,
    wait: bool = False,
    skip_preflight: bool = False,
    force: bool = False,
) -> list[str]:
    """The overrides, the values' and what the CLI's flags add (`--wait` ...), in the CLI's
    order; a Hydra flag (`-m`, `--cfg`) is the CLI's alone."""
    for override in overrides:
        if not isinstance(override, str) or override.startswith("-"):
            raise ConfigError(
                f"overrides: {override!r} is not an override; allowed: key=value strings "
                "(Hydra's flags are the CLI's; a sweep is trainstack.sweep)"
            )
    flags = [
        flag
        for flag, on in (("--wait", wait), ("--skip-preflight", skip_preflight), ("--force", force))
        if on
    ]
    _, args = split_args([*flags, *overrides, *valued(values)])
    return args


def sweep_axes(axes: Mapping[str, Sequence[Scalar]]) -> list[str]:
    """`{"trainer.lr": [1e-3, 3e-3]}` as `trainer.lr=1e-3,3e-3`, every value quoted, by the
    Training API's own rules for a sweep's axes (jobs.api.overrides.axis_overrides)."""
    if not axes:
        raise ConfigError("axes: no axis; allowed: {key: [value, ...]}, one key or more")
    for key, choices in axes.items():
        if isinstance(choices, str | bytes) or not isinstance(choices, Sequence):
            raise ConfigError(
                f"axes.{key}: {choices!r} is not a list; allowed: a list of values", key=key
            )
        for choice in choices:
            if choice is not None and not isinstance(choice, str | int | float | bool):
                raise ConfigError(
                    f"axes.{key}: {choice!r} is not a value; allowed: strings, numbers, bools",
                    key=f"axes.{key}",
                )
    try:
        return axis_overrides(axes)
    except Refused as err:
        raise ConfigError(str(err)) from None


def _refused(err: Exception) -> ConfigError:
    if isinstance(err, ConfigError):
        return err
    if isinstance(err, HydraException | OmegaConfBaseException):
        return ConfigError(one_line(err))
    return ConfigError(str(err))


def prepare(overrides: Sequence[str], **named: Any) -> MaterializedJob:
    """compose -> the run's record (an existing run id) -> validate -> materialize, as
    `trainstack launch` (jobs.app.run_single); ConfigError (one line) on bad input, with
    nothing written. `named`: materialize's run_id/sweep_id/now (a sweep's points)."""
    try:
        with HYDRA:
            cfg = compose(list(overrides))
            OmegaConf.set_readonly(cfg, False)
            if not named:  # a sweep's point is never a relaunch (relaunch_config skips it)
                cfg, _ = relaunch_config(cfg, list(overrides))
        now = named.pop("now", None) or submission.utc_now()
        return materialize(cfg, now=now, git_sha=submission.git_sha(), **named)
    except (HydraException, OmegaConfBaseException, ConfigError, *submission.refusals()) as err:
        raise _refused(err) from err


@dataclass(frozen=True)
class Launched:
    """A launched (or dry-run) job: what the backend was handed and where it went."""

    job: MaterializedJob
    request: DryRun
    """The backend's dry run: str() is exactly what was (or would be) run or sent."""
    backend: Any
    submitted: bool


def submit(job: MaterializedJob, *, dryrun: bool = False) -> Launched:
    """The job to the backend its config names (`dryrun`: nothing written or started)."""
    backend = backends.backend_for(job.cfg)
    try:
        request = backend.dryrun(job)
        if not dryrun:
            backend.schedule(request)
    except BackendError as err:
        raise SubmitError(str(err)) from err
    return Launched(job, request, backend, not dryrun)


def launch(overrides: Sequence[str], *, dryrun: bool = False) -> Launched:
    return submit(prepare(overrides), dryrun=dryrun)


def sweep(overrides: Sequence[str], sweep_id: str | None = None) -> tuple[str, list[Launched]]:
    """A grid sweep's points (`a=1,2` axes in `overrides`), all or nothing: every point
    prepared and dry-run before the first is scheduled; one whose scheduling fails cancels
    those scheduled before it and raises SubmitError naming it."""
    now = submission.utc_now()
    sweep_id = sweep_id or new_sweep_id(now)
    try:
        with HYDRA:
            points = expand([*overrides, f"sweep_id={override_value(sweep_id)}"])
    except (HydraException, OmegaConfBaseException) as err:
        raise _refused(err) from err

    def prepared(numbered) -> list[MaterializedJob]:
        run_id = sweep_point_run_id
        return [
            prepare(point, run_id=run_id(sweep_id, i), sweep_id=sweep_id, now=now)
            for i, point in numbered
        ]

    def checked(job: MaterializedJob) -> Launched:
        return submit(job, dryrun=True)

    def scheduled(dry: Launched) -> Launched:
        try:
            dry.backend.schedule(dry.request)
        except BackendError as err:
            raise SubmitError(str(err)) from err
        return Launched(dry.job, dry.request, dry.backend, True)

    def rolled_back(done: list[Launched]) -> list[str]:
        for point in done:
            point.backend.cancel(point.job.run_id)
        return []

    driver = SweepDriver(
        prepare=prepared,
        check=checked,
        submit=scheduled,
        policy=Policy.ALL_OR_NOTHING,
        roll_back=rolled_back,
    )
    try:
        return sweep_id, driver.run(list(enumerate(points))).results
    except PointError as err:
        kind = ConfigError if isinstance(err.cause, ConfigError) else SubmitError
        raise kind(str(err)) from err.cause


# -- runs ---------------------------------------------------------------------------------------
def where_backends(overrides: Sequence[str], backend: str | None = None) -> list[Any]:
    """The backends `trainstack status` consults for `overrides` (`stack=prod` ...)."""
    if backend is not None and backend not in backends.NAMES:
        raise ConfigError(
            f"backend: unknown backend {backend!r}; allowed: {', '.join(backends.NAMES)}",
            key="backend",
        )
    try:
        with HYDRA:
            return backends_for(argparse.Namespace(overrides=list(overrides), backend=backend))
    except (HydraException, OmegaConfBaseException) as err:
        raise _refused(err) from err


def find(run_id: str, found_in: Sequence[Any]) -> tuple[Any, RunStatus]:
    """(backend, status) of the first of `found_in` that knows `run_id`, else RunNotFound."""
    try:
        return find_run(list(found_in), run_id)
    except BackendError as err:
        raise RunNotFound(str(err), run_id) from err


def list_runs(found_in: Sequence[Any], sweep_id: str | None, state: str | None) -> list[Any]:
    """(backend, status) of every run the backends hold, oldest first; a backend that cannot
    be asked raises SubmitError (the CLI warns and lists the others)."""
    found = []
    for backend in found_in:
        try:
            found += [(backend, s) for s in backend.list_runs(sweep_id=sweep_id, state=state)]
        except BackendError as err:
            raise SubmitError(f"{backend.name}: {err}") from err
    return sorted(found, key=lambda item: item[1].started_at or "")


def recorded_config(run_id: str, overrides: Sequence[str]) -> dict[str, Any] | None:
    """The run's recorded, composed config (its record: jobs.relaunch.read_record), or None
    where this machine holds no record of it (a cluster run launched elsewhere)."""
    try:
        with HYDRA:
            cfg = compose([*overrides, f"run_id={override_value(run_id)}"])
        found = read_record(cfg)
    except (HydraException, OmegaConfBaseException, ConfigError) as err:
        raise _refused(err) from err
    return None if found is None else found[1]


def plain(cfg: DictConfig) -> dict[str, Any]:
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    return {str(k): v for k, v in out.items()}


def metrics(run_id: str, run_dir: str | None) -> list[dict[str, Any]]:
    """The run's metrics.jsonl records that have a step, as `trainstack plot` and the API
    read them (jobs.plot.metrics.MetricsFile: bounded lines, at most KEPT_ROWS records)."""
    if not run_dir:
        return []
    source = MetricsFile(run_id, run_dir).refresh()  # refresh_bytes None: the whole file
    records: list[dict[str, Any]] = []
    after = None
    while len(records) < KEPT_ROWS:
        page, more = source.page(after, METRICS_PAGE)
        records += page
        if not more or not page:  # indexed whole: no page is empty while more follow
            break
        after = int(page[-1]["step"])
    return records[:KEPT_ROWS]


def checkpoints(run_id: str, overrides: Sequence[str]) -> list[dict[str, Any]]:
    """What `trainstack checkpoints` lists: each step, committed, size and completeness."""
    try:
        with HYDRA:
            run_dir = existing_run_dir(run_id, list(overrides))
        reports = list_checkpoints(open_run_storage(run_dir))
    except BackendError as err:
        raise RunNotFound(str(err), run_id) from err
    except StorageError as err:
        raise SubmitError(str(err)) from err
    return [
        {
            "step": r.step,
            "committed": r.committed,
            "size_bytes": r.size_bytes,
            "complete": r.complete,
            "problem": r.problem,
        }
        for r in reports
    ]


def export(run_id: str, overrides: Sequence[str], to: str, **options: Any) -> Any:
    """`trainstack export`: a committed checkpoint as a Hugging Face directory."""
    from trainer.hf.export import export_run  # lazy: torch (seconds), for exports alone

    try:
        with HYDRA:
            run_dir = existing_run_dir(run_id, list(overrides))
        return export_run(run_dir, to, **options)
    except TrainerConfigError as err:
        raise ConfigError(str(err)) from err
    except BackendError as err:
        raise RunNotFound(str(err), run_id) from err
    except StorageError as err:
        raise SubmitError(str(err)) from err


def logs(backend: Any, run_id: str, rank: int, follow: bool) -> Iterator[str]:
    try:
        yield from backend.logs(run_id, rank=rank, follow=follow)
    except BackendError as err:
        raise SubmitError(str(err)) from err
