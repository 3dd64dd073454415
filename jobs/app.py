"""`trainstack launch`: a Hydra app (`@hydra.main`), so it takes every flag a Hydra app takes
(`--cfg`, `--resolve`, `--package`, `--info`, `--help`, `--hydra-help`, `--shell-completion`,
`-cp/-cn/-cd`, `-m` with any sweeper and launcher) plus trainstack's own flags.

How the two meet, through Hydra's public surface only:
- `hydra.main` reads its arguments from `sys.argv`, so the front door (jobs/commands/launch.py)
  takes trainstack's flags off the line and execs this app with Hydra's arguments alone and its
  flags in `LAUNCH_ENV`; `run_app` reads them back once. The one adaptation left is tab
  completion's `$COMP_LINE` (`completion_line`: the typed line without the word `launch`).
- The launch's state lives in one object, the task function `LaunchTask`: Hydra hands it to
  the sweeper and the launcher (`setup(task_function=...)`), so the launchers read `--dryrun`
  from it and leave each batch's prepared jobs in it, the task schedules those, and the
  points that failed are counted in it (by the sweep's launch path, jobs.sweep_driver). No
  module global or class attribute carries any of it.
- Hydra prints a composition error with a hint and exits 1; trainstack's rule is one line
  naming the key and exit 2. `HYDRA_FULL_ERROR=1` (Hydra's documented switch) makes Hydra
  raise instead, and `launch` turns the error into that line.
- `--help` is Hydra's app help, from `hydra.help.template` in conf/config.yaml, which lists
  the config groups, trainstack's flags and Hydra's.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from jobs import backend_registry, submission
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.manifest_checks import ManifestError
from jobs.commands.launch import DRYRUN_SWEEP_DIR_ENV, LAUNCH_ENV, PROG, LaunchFlags
from jobs.compose import CONFIG_NAME, HYDRA_VERSION_BASE
from jobs.errors import EXIT_BAD_INPUT, JobConfigError, one_line
from jobs.materialize import materialize
from jobs.naming import sweep_point_run_id
from jobs.relaunch import relaunch_config
from jobs.run import Warned, follows, run_job
from jobs.schema import register
from jobs.sweep import last_loss, sweep_id_for
from jobs.sweep_points import (
    PointFailed,
    PointResult,
    SweepPointError,
    SweepPointsLost,
    point_heading,
)

if TYPE_CHECKING:
    from jobs.materialize import MaterializedJob


@dataclass
class LaunchTask:
    """The task function `launch` hands Hydra, and the one object the launch's state passes
    through: Hydra gives it to the sweeper and the launcher as their `task_function`."""

    flags: LaunchFlags
    prepared: dict[int, MaterializedJob] = field(default_factory=dict)
    """The batch being launched, by Hydra job number: its launcher prepared (validated) them
    all, and each point schedules its own instead of materializing it a second time."""
    code: int = 0
    """A single run's exit code."""
    failed_points: int = 0
    """Points of the multirun that could not be submitted or did not succeed: counted by the
    sweep's launch path (jobs.sweep_driver) under trainstack's launchers, by the task itself
    under any other."""
    shared: backend_registry.Shared = field(default_factory=backend_registry.Shared)
    """What the launch's backends share (the kubernetes backend: the runs it submitted, which
    the launcher's followers may restart, and its cluster connections)."""
    warned: Warned = field(default_factory=Warned)
    """The plan warnings this launch's points have printed (a sweep says each once)."""

    def __call__(self, cfg: Any) -> Any:
        """One job (a run, or one point of a multirun) to its backend."""
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode == RunMode.MULTIRUN:
            job = self.prepared.pop(hydra_cfg.job.num, None)
            result = run_point(cfg, job, self.shared, self.warned)
            if job is None:  # a launcher not trainstack's: no launch path counted the point
                self.failed_points += 1 if result.failed else 0
            return result
        self.code = run_single(cfg, dryrun=self.flags.dryrun, shared=self.shared)
        return None

    def hand_over(self, jobs: dict[int, MaterializedJob]) -> None:
        """A launcher's prepared batch (replacing the batch before it)."""
        self.prepared = dict(jobs)


@contextmanager
def hydra_raises() -> Iterator[None]:
    saved = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved


@contextmanager
def completion_line() -> Iterator[None]:
    """Tab completion: the script `--shell-completion install=bash|fish` prints asks
    `trainstack -sc query=...` with the typed line in $COMP_LINE, which Hydra's completion reads
    as `<app> <overrides>`. Here the app is `trainstack launch`, so for the call the line reads
    without the subcommand word."""
    line = os.environ.get("COMP_LINE")
    words = line.split(maxsplit=2) if line else []
    if len(words) < 2 or words[1] != "launch":
        yield
        return
    os.environ["COMP_LINE"] = line.replace(" launch", "", 1)
    try:
        yield
    finally:
        os.environ["COMP_LINE"] = line


def fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run_app() -> int:
    """The Hydra app the front door exec'd: `sys.argv` as given, flags from the environment."""
    flags = LaunchFlags.from_env(os.environ.pop(LAUNCH_ENV, ""))
    scratch = os.environ.pop(DRYRUN_SWEEP_DIR_ENV, None)
    try:
        return launch(flags, sys.argv[1:])
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def launch(flags: LaunchFlags, hydra_args: Sequence[str]) -> int:
    """Runs the Hydra app on this process's `sys.argv`; returns the exit code."""
    multirun = "-m" in hydra_args or "--multirun" in hydra_args
    task = LaunchTask(flags)
    register()
    app = hydra.main(config_path=None, config_name=CONFIG_NAME, version_base=HYDRA_VERSION_BASE)
    try:
        with hydra_raises(), completion_line():
            app(task)()
    except SystemExit as exit_:  # --help, --version, argparse errors
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except SweepPointError as err:
        return fail(str(err))
    except (PointFailed, SweepPointsLost) as err:  # a point failed, or was lost: not input
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    except (HydraException, OmegaConfBaseException) as err:
        return fail(flags.naming_the_flag(one_line(err)))
    except ValueError as err:  # Hydra's own usage errors (e.g. --resolve alone)
        return fail(str(err).splitlines()[0])
    if multirun:
        return 1 if task.failed_points else 0
    return task.code


def _writable(cfg: Any) -> Any:
    OmegaConf.set_readonly(cfg, False)
    return cfg


def run_single(cfg: Any, *, dryrun: bool, shared: backend_registry.Shared | None = None) -> int:
    try:
        cfg, record = relaunch_config(_writable(cfg), list(HydraConfig.get().overrides.task))
        job = materialize(cfg, now=submission.utc_now(), git_sha=submission.git_sha())
    except (JobConfigError, ManifestError) as err:
        return fail(str(err))
    except OmegaConfBaseException as err:  # an interpolation error met while validating
        return fail(one_line(err))
    if record:
        print(f"run {job.run_id}: its recorded config ({record}) with this command line's changes")
    try:
        return run_job(backend_registry.backend_for(job.cfg, shared), job, dryrun=dryrun)
    except BackendError as err:
        return fail(str(err))


def run_point(
    cfg: Any,
    job: MaterializedJob | None,
    shared: backend_registry.Shared | None = None,
    warned: Warned | None = None,
) -> PointResult:
    """One multirun point: the job its launcher prepared (validated with the whole batch), or,
    under a launcher that prepares nothing (`job` None), materialized here. Errors are returned
    in the PointResult, so one failing point never stops the others."""
    hydra_cfg = HydraConfig.get()
    index = hydra_cfg.job.num
    result = PointResult(index, list(hydra_cfg.overrides.task))
    try:
        if job is None:
            cfg = _writable(cfg)
            sweep_id = cfg.sweep_id or sweep_id_for(cfg)
            run_id = cfg.run_id or sweep_point_run_id(sweep_id, index)
            job = materialize(
                cfg,
                now=submission.utc_now(),
                git_sha=submission.git_sha(),
                run_id=run_id,
                sweep_id=sweep_id,
            )
        result.run_id, result.plan = job.run_id, job.plan.summary()
        result.sweep_id = job.spec.labels.get("trainstack.io/sweep-id")
        backend = backend_registry.backend_for(job.cfg, shared)
        brief = not follows(job)
        if not brief:
            print(point_heading(index, result.overrides), flush=True)
        result.exit_code = run_job(backend, job, brief=brief, warned=warned)
        result.state = backend.status(job.run_id).state
        if not backend_registry.traits_of(job.cfg.backend.name).pods:  # the run dir is here
            result.loss = last_loss(job.spec.run_dir)
    except Exception as err:  # reported per point in the summary
        result.error = str(err).splitlines()[0] if str(err) else type(err).__name__
    return result
