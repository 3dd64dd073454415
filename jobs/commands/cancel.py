"""`trainstack cancel RUN | --sweep ID`: stop runs (idempotent: finished or unknown runs are
left alone). The trainer gets SIGTERM and checkpoints; cancelled runs are never auto-restarted."""

from __future__ import annotations

import argparse

from jobs.backends.base import RENDERED, BackendError
from jobs.backends.kubernetes.client.ownership import NotOurs
from jobs.commands.run_lookup import add_common_arguments, backends_for, fail, find_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sweep", metavar="ID", help="every unfinished run of this sweep")
    parser.add_argument(
        "--force",
        action="store_true",
        help="also runs another user owns (trainstack.io/owner); kubectl RBAC still applies",
    )
    add_common_arguments(parser)
    parser.usage = "trainstack cancel (RUN | --sweep ID) [--force] [--backend B] [overrides ...]"


def run(args: argparse.Namespace) -> int:
    # RUN is the one argument that is not a `key=value` override.
    names = [a for a in args.overrides if "=" not in a]
    args.overrides = [a for a in args.overrides if "=" in a]
    if len(names) + (args.sweep is not None) != 1:
        return fail("cancel", "give exactly one of RUN or --sweep ID", 2)
    args.run_id = names[0] if names else None
    if args.force:
        args.overrides.append("backend.others_runs=true")
    try:
        backends = backends_for(args)
        if args.sweep is None:
            try:
                backend, status = find_run(backends, args.run_id)
            except BackendError:
                print(f"{args.run_id}: no such run; nothing to cancel")
                return 0
            targets = [(backend, status)]
        else:
            targets = [(b, s) for b in backends for s in b.list_runs(sweep_id=args.sweep)]
        for backend, status in targets:
            backend.cancel(status.run_id)  # also stops automatic restarts of a failed run
            done = f"already {status.state}" if status.finished else "cancel requested"
            if status.state == RENDERED:
                done = "rendered, never run: nothing to cancel"
            print(f"{status.run_id}: {done} ({backend.name})")
    except BackendError as err:
        return fail("cancel", str(err), 2 if isinstance(err, NotOurs) else 1)
    if args.sweep is not None and not targets:
        print(f"sweep {args.sweep}: no runs found; nothing to cancel")
    return 0
