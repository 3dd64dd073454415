"""`trainstack logs RUN [-f] [--rank N]`: a run's log; on the cluster, rank N's pod (rank 0 is
the master) — `-f` follows it across pod restarts until the run ends."""

from __future__ import annotations

import argparse

from jobs.backends.base import BackendError, NoLogs
from jobs.commands.run_lookup import add_common_arguments, backends_for, fail, find_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN")
    parser.add_argument("-f", "--follow", action="store_true", help="stream until the run ends")
    parser.add_argument("--rank", type=int, default=0, help="node rank (default 0: master)")
    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        backends = backends_for(args)
        try:
            backend, status = find_run(backends, args.run_id)
        except BackendError:
            # A run the cluster no longer knows may still have its logs archived.
            archives = [b for b in backends if hasattr(b, "archived_logs")]
            if args.follow or not archives:
                raise
            backend, status = archives[0], None
        ranks = status.log_ranks if status else None
        if ranks is not None and not 0 <= args.rank < ranks:  # bad input: exit 2
            has = "rank 0 only" if ranks == 1 else f"ranks 0-{ranks - 1}"
            return fail("logs", f"--rank {args.rank}: run {args.run_id} has {has}", 2)
        for line in backend.logs(args.run_id, rank=args.rank, follow=args.follow):
            print(line, flush=True)
    except NoLogs as err:
        return fail("logs", str(err), code=2)
    except BackendError as err:
        return fail("logs", str(err))
    except KeyboardInterrupt:
        return 130
    return 0
