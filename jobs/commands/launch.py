"""`trainstack launch [--dryrun] [--wait] [--skip-preflight] [Hydra flags] [overrides ...]`

A Hydra app (jobs/app.py): compose -> validate -> materialize -> print the plan -> hand the job
to its backend; `-m` sweeps through Hydra's sweeper and launchers (jobs/sweep.py). Bad input is
one line on stderr and exit 2, before anything is written or started.

This module is the front door, light on purpose (it runs before the exec): `hydra.main` reads
its arguments from `sys.argv` and nowhere else (Hydra offers no other public way in, and its
parser refuses flags it does not know). So `trainstack launch ARGS` (`main`) takes trainstack's
flags off the arguments (`--dryrun`, `--wait`, `--skip-preflight`, `--force`: argparse
`parse_known_args`, anywhere on the line) and replaces itself (`os.execve`) with the same
program given only Hydra's arguments, its flags in the environment (`LAUNCH_ENV`). That process
is a plain Hydra app (jobs/app.py `run_app`): `sys.argv` is what the operating system passed,
never rewritten. `--wait`, `--skip-preflight` and `--force` become overrides
(`backend.wait=true`, `backend.preflight=false`, `backend.others_runs=true`), so `--cfg job`
shows them; `--dryrun` travels in `LAUNCH_ENV` to the app, which hands it to the launchers in
its task object.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NoReturn

PROG = "trainstack launch"

LAUNCH_ENV = "TRAINSTACK_LAUNCH"
"""In the environment of the process `main` becomes: it is the Hydra app, and the value lists
trainstack's flags (comma-separated names, may be empty)."""
DRYRUN_SWEEP_DIR_ENV = "TRAINSTACK_DRYRUN_SWEEP_DIR"
"""A dry-run sweep's scratch `hydra.sweep.dir`, which the app removes when it ends."""


@dataclass(frozen=True)
class LaunchFlags:
    """trainstack's own flags of the launch being run (set by `main`, carried to the app in
    `LAUNCH_ENV`, read there by the task object the launchers are handed)."""

    dryrun: bool = False
    wait: bool = False
    skip_preflight: bool = False

    def naming_the_flag(self, line: str) -> str:
        """A one-line refusal of a key one of these flags set, saying which flag set it (the
        user typed `--skip-preflight`, not `backend.preflight=false`)."""
        for name, key in FLAG_KEYS.items():
            if getattr(self, name) and line.startswith(f"{key}:"):
                return f"--{name.replace('_', '-')} sets {line}"
        return line

    def to_env(self) -> str:
        return ",".join(name for name, value in asdict(self).items() if value)

    @classmethod
    def from_env(cls, value: str) -> LaunchFlags:
        return cls(**{name: True for name in value.split(",") if name})


FLAG_KEYS = {"wait": "backend.wait", "skip_preflight": "backend.preflight"}
"""The backend option each LaunchFlags flag sets (kept per backend: `backend.preflight` is only
the kubernetes backend's)."""


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
    overrides += [f"{FLAG_KEYS['wait']}=true"] if flags.wait else []
    overrides += [f"{FLAG_KEYS['skip_preflight']}=false"] if flags.skip_preflight else []
    overrides += ["backend.others_runs=true"] if known.force else []
    return flags, [*options, *overrides]


def main(argv: Sequence[str]) -> NoReturn:
    """`trainstack launch ARGS`: become the Hydra app (see the module's docstring)."""
    flags, args = split_args(argv)
    env = dict(os.environ, **{LAUNCH_ENV: flags.to_env()})
    if "-m" in args or "--multirun" in args:
        args = with_sweep_id(args)
        if flags.dryrun:  # Hydra's sweeper writes multirun.yaml; a dry run writes nothing
            import tempfile  # lazy: start-up time (this process only execs); dry sweeps only

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
    from datetime import UTC, datetime  # lazy: start-up time (this process only execs)

    from jobs.naming import new_sweep_id  # lazy: as datetime; a multirun without sweep_id only

    return [*args, f"sweep_id={new_sweep_id(datetime.now(UTC))}"]
