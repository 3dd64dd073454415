"""`trainstack launch [--dryrun] [--wait] [--skip-preflight] [-m] [overrides ...]`

Compose -> validate -> materialize (jobs/submission.py, shared with the Training API) -> print
the plan -> hand the job to the backend. Bad input is one line on stderr and exit 2, before
anything is written or started.
"""

from __future__ import annotations

import argparse
import sys

from jobs.errors import EXIT_BAD_INPUT
from jobs.submission import git_sha


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


def fail(message: str) -> int:
    print(f"trainstack launch: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, *flag_overrides(args)]
    if args.multirun:
        from jobs.sweep import launch_sweep

        return launch_sweep(overrides, dryrun=args.dryrun, git_sha=git_sha())
    from jobs.backends.base import BackendError
    from jobs.submission import BadInput, prepare

    try:
        job = prepare(overrides)
    except BadInput as err:
        return fail(str(err))
    from jobs.backends import backend_for
    from jobs.run import run_job

    try:
        return run_job(backend_for(job.cfg), job, dryrun=args.dryrun)
    except BackendError as err:
        return fail(str(err))
