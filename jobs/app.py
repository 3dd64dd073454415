"""`trainstack launch`: a Hydra app (`@hydra.main`), so it takes every flag a Hydra app takes
(`--cfg`, `--resolve`, `--package`, `--info`, `--help`, `--hydra-help`, `--shell-completion`,
`-cp/-cn/-cd`, `-m` with any sweeper and launcher) plus trainstack's own three flags.

How the two meet, through Hydra's public surface only:
- `hydra.main` reads its arguments from `sys.argv` and nowhere else (Hydra offers no other
  public way in, and its parser refuses flags it does not know). The dispatcher is
  `trainstack <command>`, so `launch_app` first takes trainstack's flags off the arguments
  (`--dryrun`, `--wait`, `--skip-preflight`: argparse `parse_known_args`, anywhere on the
  line), then calls the decorated app with `sys.argv` set to `[trainstack, *hydra_args]` for
  the duration of the call (`hydra_argv`), restoring it after: the one adaptation, kept here
  (and its twin for tab completion, `completion_line`: $COMP_LINE without the word `launch`).
- `--wait` and `--skip-preflight` become overrides (`backend.wait=true`,
  `backend.preflight=false`), so `--cfg job` shows them; `--dryrun` is read by the task
  function and the launchers from `FLAGS`.
- Hydra prints a composition error with a hint and exits 1; trainstack's rule is one line
  naming the key and exit 2. `HYDRA_FULL_ERROR=1` (Hydra's documented switch) makes Hydra
  raise instead, and `launch_app` turns the error into that line.
- `--help` is Hydra's app help, from `hydra.help.template` in conf/config.yaml, which lists
  the config groups, trainstack's flags and Hydra's.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from jobs.errors import EXIT_BAD_INPUT

PROG = "trainstack launch"


@dataclass
class LaunchFlags:
    """trainstack's own flags of the launch being run (read by the task function and the
    launchers; reset by every `launch_app`)."""

    dryrun: bool = False
    wait: bool = False
    skip_preflight: bool = False


FLAGS = LaunchFlags()


def flags_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("--dryrun", action="store_true", help="print the exact request only")
    parser.add_argument("--wait", action="store_true", help="kubernetes: follow to the end")
    parser.add_argument("--skip-preflight", action="store_true", help="kubernetes: no checks")
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
    return flags, [*options, *overrides]


@contextmanager
def hydra_argv(args: Sequence[str]) -> Iterator[None]:
    """`sys.argv` as `hydra.main` reads it, for one call; then restored."""
    saved = sys.argv
    sys.argv = [saved[0] if saved else "trainstack", *args]
    try:
        yield
    finally:
        sys.argv = saved


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
def sweep_args(args: list[str], multirun: bool) -> Iterator[list[str]]:
    """A multirun's arguments with its sweep id fixed up front (`sweep_id=`, else a new one),
    so the sweep dir Hydra's sweeper writes `multirun.yaml` to is the sweep's own. A dry run
    writes nothing: Hydra's sweep dir is then a temporary directory, removed after."""
    if not multirun:
        yield args
        return
    from datetime import UTC, datetime

    from jobs.naming import new_sweep_id

    if not any(a.startswith("sweep_id=") for a in args):
        args = [*args, f"sweep_id={new_sweep_id(datetime.now(UTC))}"]
    if not FLAGS.dryrun:
        yield args
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="trainstack-dryrun-") as scratch:
        yield [*args, f"hydra.sweep.dir={scratch}"]


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


def launch_app(argv: Sequence[str]) -> int:
    """`trainstack launch ARGS...`; returns the exit code."""
    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from jobs.compose import CONFIG_NAME, HYDRA_VERSION_BASE
    from jobs.errors import one_line
    from jobs.schema import register
    from jobs.sweep import PREPARED, PointFailed, SweepPointError, SweepSummary

    global FLAGS
    FLAGS, hydra_args = split_args(argv)
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
        with (
            sweep_args(hydra_args, multirun) as args,
            hydra_argv(args),
            hydra_raises(),
            completion_line(),
        ):
            app(task)()
    except SystemExit as exit_:  # --help, --version, argparse errors
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except SweepPointError as err:
        return fail(str(err))
    except PointFailed as err:  # a point failed after the sweep ran (Hydra re-raises it)
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
    from jobs.backends import backend_for
    from jobs.backends.base import BackendError
    from jobs.errors import one_line
    from jobs.manifest_checks import ManifestError
    from jobs.materialize import materialize
    from jobs.run import run_job
    from jobs.submission import git_sha, utc_now
    from jobs.validate import JobConfigError

    try:
        job = materialize(_writable(cfg), now=utc_now(), git_sha=git_sha())
    except (JobConfigError, ManifestError) as err:
        return fail(str(err))
    except Exception as err:  # an OmegaConf interpolation error met while validating
        from omegaconf.errors import OmegaConfBaseException

        if isinstance(err, OmegaConfBaseException):
            return fail(one_line(err))
        raise
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
