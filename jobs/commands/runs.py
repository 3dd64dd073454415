"""`trainstack runs [--sweep ID] [--state S] [--mine]`: a table of runs, here and on the cluster.

`--mine`: only cluster runs whose owner label (`trainstack.io/owner`) is your name, the
`job.owner` that `launch` records: $TRAINSTACK_USER, else your login name ($USER); runs in
this machine's run dirs (local and rendered) are yours anyway and are always listed.

Columns: run, sweep, backend, state, nodes, retries, age, the last step and loss from the
run dir's metrics.jsonl when known, and the newest `trainstack eval` scores (`eval/`). A
cluster that cannot be reached is one warning line; the local runs are still listed.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from jobs.backend_registry import traits_of
from jobs.backends.base import RENDERED, STATES, BackendError, RunStatus
from jobs.commands.run_lookup import add_common_arguments, backends_for, compose_for, fail
from trainer.evaluation.results import headline, run_evals

EVAL_WIDTH = 40
"""Characters of the eval column: the newest evaluation's first metric per task."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sweep", metavar="ID", help="only the runs of this sweep")
    parser.add_argument("--state", choices=STATES, help="only runs in this state")
    parser.add_argument(
        "--mine", action="store_true", help="only your runs ($TRAINSTACK_USER, else $USER)"
    )
    add_common_arguments(parser)


def age(started_at: str | None, now: datetime) -> str:
    """`3d4h`, `2h5m`, `7m`: time since `started_at` (ISO-8601 UTC)."""
    if not started_at:
        return "-"
    try:
        started = datetime.strptime(started_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "-"
    minutes = max(0, int((now - started).total_seconds() // 60))
    days, hours, mins = minutes // 1440, minutes // 60 % 24, minutes % 60
    if days:
        return f"{days}d{hours}h"
    return f"{hours}h{mins}m" if hours else f"{mins}m"


def newest_eval(run: RunStatus) -> str:
    evals = run_evals(run.run_dir)
    if not evals:
        return "-"
    text = f"{evals[-1].step}: {headline(evals[-1])}"
    return text if len(text) <= EVAL_WIDTH else text[: EVAL_WIDTH - 1] + "…"


def table(runs: list[RunStatus], now: datetime):
    from rich.table import Table  # lazy: start-up time of the other commands

    grid = Table(box=None, header_style="bold")
    columns = (
        "run",
        "sweep",
        "backend",
        "state",
        "nodes",
        "retries",
        "age",
        "step",
        "loss",
        "eval",
    )
    for column in columns:
        grid.add_column(
            column, justify="right" if column in ("nodes", "retries", "step") else "left"
        )
    for run in runs:
        grid.add_row(
            run.run_id,
            run.sweep_id or "-",
            run.backend,
            run.state,
            str(run.nodes),
            str(run.retries),
            age(run.started_at, now),
            "-" if run.last_step is None else str(run.last_step),
            "-" if run.last_loss is None else f"{run.last_loss:.4f}",
            newest_eval(run),
        )
    return grid


def run(args: argparse.Namespace) -> int:
    from rich.console import Console  # lazy: start-up time of the other commands

    runs: list[RunStatus] = []
    failed = False
    me = None
    if args.mine:
        me = compose_for(args.overrides).job.owner
        if not me:
            return fail("runs", "--mine: no user name; set $TRAINSTACK_USER", code=2)
    try:
        backends = backends_for(args)
    except BackendError as err:
        return fail("runs", str(err))
    for backend in backends:
        try:
            runs += backend.list_runs(sweep_id=args.sweep, state=args.state)
        except BackendError as err:
            failed = True
            print(f"trainstack runs: {backend.name}: {err}", file=sys.stderr)
    if args.mine:
        runs = [r for r in runs if not traits_of(r.backend).on_cluster or r.owner == me]
    runs.sort(key=lambda r: r.started_at or "")
    Console(width=160).print(table(runs, datetime.now(UTC)))
    if args.sweep:
        done = sum(r.finished for r in runs)
        rendered = sum(r.state == RENDERED for r in runs)
        also = f", {rendered} rendered (written, not run)" if rendered else ""
        print(f"sweep {args.sweep}: {done}/{len(runs)} finished{also}")
    return 1 if failed and not runs else 0
