"""`trainstack launch [--dryrun] [--wait] [--skip-preflight] [-m] [overrides ...]`

Compose -> validate -> materialize -> print the plan -> hand the job to the backend. Bad
input is one line on stderr and exit 2, before anything is written or started.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from jobs.errors import EXIT_BAD_INPUT, one_line

REPO_DIR = Path(__file__).resolve().parent.parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dryrun", action="store_true", help="print the exact request only")
    parser.add_argument("--wait", action="store_true", help="kubernetes: follow to the end")
    parser.add_argument("--skip-preflight", action="store_true", help="kubernetes: no checks")
    parser.add_argument("-m", "--multirun", action="store_true", help="one job per sweep point")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=llama3_1b")


def flag_overrides(args: argparse.Namespace) -> list[str]:
    extra = []
    if args.wait:
        extra.append("backend.wait=true")
    if args.skip_preflight:
        extra.append("backend.preflight=false")
    return extra


@cache
def git_sha(repo: Path = REPO_DIR) -> str | None:
    """HEAD of the checkout the job is launched from (labels; default image tag). Asked once
    per process: every point of a sweep run by a Hydra launcher calls it, and all of them
    must carry the SHA the sweep was validated with."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def fail(message: str) -> int:
    print(f"trainstack launch: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, *flag_overrides(args)]
    if args.multirun:
        from jobs.sweep import launch_sweep

        return launch_sweep(overrides, dryrun=args.dryrun, git_sha=git_sha())
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from jobs.backends.base import BackendError
    from jobs.compose import compose
    from jobs.manifest_checks import ManifestError
    from jobs.materialize import materialize
    from jobs.validate import JobConfigError

    try:
        cfg = compose(overrides)
        job = materialize(cfg, now=datetime.now(UTC), git_sha=git_sha())
    except (HydraException, OmegaConfBaseException) as err:
        return fail(one_line(err))
    except (JobConfigError, ManifestError) as err:
        return fail(str(err))
    from jobs.backends import backend_for
    from jobs.run import run_job

    try:
        return run_job(backend_for(cfg), job, dryrun=args.dryrun)
    except BackendError as err:
        return fail(str(err))
