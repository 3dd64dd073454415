"""`trainstack launch`: a Hydra app (`@hydra.main`), so it takes every flag a Hydra app takes
(`--cfg`, `--resolve`, `--package`, `--info`, `--help`, `--hydra-help`, `--shell-completion`,
`-cp/-cn/-cd`, `-m` with any sweeper and launcher) plus trainstack's own three flags.

How the two meet, through Hydra's public surface only:
- `hydra.main` reads its arguments from `sys.argv` and nowhere else (Hydra offers no other
  public way in, and its parser refuses flags it does not know). So `trainstack launch ARGS`
  (`exec_launch`) takes trainstack's flags off the arguments (`--dryrun`, `--wait`,
  `--skip-preflight`: argparse `parse_known_args`, anywhere on the line) and replaces itself
  (`os.execve`) with the same program given only Hydra's arguments, its flags in the
  environment (`LAUNCH_ENV`). That process is a plain Hydra app: `sys.argv` is what the
  operating system passed, never rewritten (`run_app`). The one adaptation left is tab
  completion's `$COMP_LINE` (`completion_line`: the typed line without the word `launch`).
- `--wait` and `--skip-preflight` become overrides (`backend.wait=true`,
  `backend.preflight=false`), so `--cfg job` shows them; `--dryrun` is read by the task
  function and the launchers from `FLAGS`.
- Hydra prints a composition error with a hint and exits 1; trainstack's rule is one line
  naming the key and exit 2. `HYDRA_FULL_ERROR=1` (Hydra's documented switch) makes Hydra
  raise instead, and `launch` turns the error into that line.
- `--help` is Hydra's app help, from `hydra.help.template` in conf/config.yaml, which lists
  the config groups, trainstack's flags and Hydra's.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from jobs.errors import EXIT_BAD_INPUT

PROG = "trainstack launch"


@dataclass
class LaunchFlags:
    """trainstack's own flags of the launch being run (read by the task function and the
    launchers; set by `launch`)."""

    dryrun: bool = False
    wait: bool = False
    skip_preflight: bool = False

    def to_env(self) -> str:
        return ",".join(name for name, value in asdict(self).items() if value)

    @classmethod
    def from_env(cls, value: str) -> LaunchFlags:
        return cls(**{name: True for name in value.split(",") if name})


FLAGS = LaunchFlags()

LAUNCH_ENV = "TRAINSTACK_LAUNCH"
"""In the environment of the process `exec_launch` becomes: it is the Hydra app, and the value
lists trainstack's flags (comma-separated names, may be empty)."""
DRYRUN_SWEEP_DIR_ENV = "TRAINSTACK_DRYRUN_SWEEP_DIR"
"""A dry-run sweep's scratch `hydra.sweep.dir`, which the app removes when it ends."""


def flags_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("--dryrun", action="store_true", help="print the exact request only")
    parser.add_argument("--wait", action="store_true", help="kubernetes: follow to the end")
    parser.add_argument("--skip-preflight", action="store_true", help="kubernetes: no checks")
    parser.add_argument(
        "--force", action="store_true", help="kubernetes: resubmit another user's run"
    )
    return parser


HYDRA_VALUE_FLAGS = frozenset(
    {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn"}
    | {"--config-dir", "-cd", "--experimental-rerun"}
)
"""Hydra's flags that take the next argument as their value (`--info` takes one optionally)."""
INFO_CHOICES = frozenset({"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"})


def split_args(argv: Sequence[str]) -> tuple[LaunchFlags, list[str]]:
    """(trainstack's flags, Hydra's flags then the overrides). Hydra's parser wants its flags
    before the overrides; trainstack has always taken them anywhere on the line."""
    known, rest = flags_parser().parse_known_args(list(argv))
    flags = LaunchFlags(known.dryrun, known.wait, known.skip_preflight)
    options, overrides = [], []
    takes_value = False
    for arg in rest:
        if takes_value or arg.startswith("-"):
            options.append(arg)
            takes_value = arg in HYDRA_VALUE_FLAGS
        elif options and options[-1] in ("--info", "-i") and arg in INFO_CHOICES:
            options.append(arg)
        else:
            overrides.append(arg)
    overrides += ["backend.wait=true"] if flags.wait else []
    overrides += ["backend.preflight=false"] if flags.skip_preflight else []
    overrides += ["backend.others_runs=true"] if known.force else []
    return flags, [*options, *overrides]


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


def exec_launch(argv: Sequence[str]) -> NoReturn:
    """`trainstack launch ARGS`: become the Hydra app (see the module's docstring)."""
    import tempfile

    flags, args = split_args(argv)
    env = dict(os.environ, **{LAUNCH_ENV: flags.to_env()})
    if "-m" in args or "--multirun" in args:
        args = with_sweep_id(args)
        if flags.dryrun:  # Hydra's sweeper writes multirun.yaml; a dry run writes nothing
            scratch = tempfile.mkdtemp(prefix="trainstack-dryrun-")
            args.append(f"hydra.sweep.dir={scratch}")
            env[DRYRUN_SWEEP_DIR_ENV] = scratch
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [*this_program(), *args], env)


def this_program() -> list[str]:
    """The command that starts this program again: the installed `trainstack` script (Hydra
    then names the app after it: help, errors, the completion script), else the module."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.isfile(script) and not script.endswith(".py"):
        return [sys.executable, script]
    return [sys.executable, "-m", "jobs.launch"]


def with_sweep_id(args: list[str]) -> list[str]:
    """A multirun's arguments with its sweep id fixed up front (`sweep_id=`, else a new one),
    so the sweep dir Hydra's sweeper writes `multirun.yaml` to is the sweep's own."""
    if any(a.startswith("sweep_id=") for a in args):
        return list(args)
    from datetime import UTC, datetime

    from jobs.naming import new_sweep_id

    return [*args, f"sweep_id={new_sweep_id(datetime.now(UTC))}"]


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
    """The Hydra app `exec_launch` started: `sys.argv` as given, flags from the environment."""
    import shutil

    flags = LaunchFlags.from_env(os.environ.pop(LAUNCH_ENV, ""))
    scratch = os.environ.pop(DRYRUN_SWEEP_DIR_ENV, None)
    try:
        return launch(flags, sys.argv[1:])
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def launch(flags: LaunchFlags, hydra_args: Sequence[str]) -> int:
    """Runs the Hydra app on this process's `sys.argv`; returns the exit code."""
    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from jobs.compose import CONFIG_NAME, HYDRA_VERSION_BASE
    from jobs.errors import one_line
    from jobs.schema import register
    from jobs.sweep import PREPARED, PointFailed, SweepPointError, SweepPointsLost, SweepSummary

    global FLAGS
    FLAGS = flags
    multirun = "-m" in hydra_args or "--multirun" in hydra_args
    outcome: dict[str, int] = {}

    def task(cfg: Any) -> Any:
        code, result = run_task(cfg)
        outcome["code"] = code
        return result

    register()
    app = hydra.main(config_path=None, config_name=CONFIG_NAME, version_base=HYDRA_VERSION_BASE)
    SweepSummary.failed_points = 0
    PREPARED.clear()
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
        return fail(one_line(err))
    except ValueError as err:  # Hydra's own usage errors (e.g. --resolve alone)
        return fail(str(err).splitlines()[0])
    if multirun:
        return 1 if SweepSummary.failed_points else 0
    return outcome.get("code", 0)


def run_task(cfg: Any) -> tuple[int, Any]:
    """The task function: one job (a run, or one point of a multirun) to its backend."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.get().mode == RunMode.MULTIRUN:
        return run_point(cfg)
    return run_single(cfg), None


def _writable(cfg: Any) -> Any:
    from omegaconf import OmegaConf

    OmegaConf.set_readonly(cfg, False)
    return cfg


def run_single(cfg: Any) -> int:
    from hydra.core.hydra_config import HydraConfig

    from jobs.backends import backend_for
    from jobs.backends.base import BackendError
    from jobs.backends.kubernetes.manifest_checks import ManifestError
    from jobs.errors import one_line
    from jobs.materialize import materialize
    from jobs.relaunch import relaunch_config
    from jobs.run import run_job
    from jobs.submission import git_sha, utc_now
    from jobs.validate import JobConfigError

    try:
        cfg, record = relaunch_config(_writable(cfg), list(HydraConfig.get().overrides.task))
        job = materialize(cfg, now=utc_now(), git_sha=git_sha())
    except (JobConfigError, ManifestError) as err:
        return fail(str(err))
    except Exception as err:  # an OmegaConf interpolation error met while validating
        from omegaconf.errors import OmegaConfBaseException

        if isinstance(err, OmegaConfBaseException):
            return fail(one_line(err))
        raise
    if record:
        print(f"run {job.run_id}: its recorded config ({record}) with this command line's changes")
    try:
        return run_job(backend_for(job.cfg), job, dryrun=FLAGS.dryrun)
    except BackendError as err:
        return fail(str(err))


def run_point(cfg: Any) -> tuple[int, Any]:
    """One multirun point: the job its launcher prepared (validated with the whole batch), or,
    under a launcher that prepares nothing, materialized here. Errors are returned in the
    PointResult, so one failing point never stops the others."""
    from hydra.core.hydra_config import HydraConfig

    from jobs.backends import backend_for
    from jobs.materialize import materialize
    from jobs.naming import sweep_point_run_id
    from jobs.run import follows, run_job
    from jobs.submission import git_sha, utc_now
    from jobs.sweep import PREPARED, PointResult, last_loss, sweep_id_for

    hydra_cfg = HydraConfig.get()
    index = hydra_cfg.job.num
    result = PointResult(index, list(hydra_cfg.overrides.task))
    try:
        job = PREPARED.pop((cfg.sweep_id, index), None)
        if job is None:
            cfg = _writable(cfg)
            sweep_id = cfg.sweep_id or sweep_id_for(cfg)
            run_id = cfg.run_id or sweep_point_run_id(sweep_id, index)
            job = materialize(
                cfg, now=utc_now(), git_sha=git_sha(), run_id=run_id, sweep_id=sweep_id
            )
        result.run_id, result.plan = job.run_id, job.plan.summary()
        result.sweep_id = job.spec.labels.get("trainstack.io/sweep-id")
        backend = backend_for(job.cfg)
        brief = not follows(job)
        if not brief:
            print(f"\n== point {index}: {' '.join(result.overrides)}", flush=True)
        result.exit_code = run_job(backend, job, brief=brief)
        result.state = backend.status(job.run_id).state
        if job.cfg.backend.name == "local":
            result.loss = last_loss(job.spec.run_dir)
    except Exception as err:  # reported per point in the summary
        result.error = str(err).splitlines()[0] if str(err) else type(err).__name__
    return result.exit_code or (1 if result.error else 0), result
