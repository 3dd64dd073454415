"""`trainstack status RUN [--backend B] [overrides ...]`: one run's state, retries, progress."""

from __future__ import annotations

import argparse

from jobs.backends.base import BackendError
from jobs.commands.run_lookup import add_common_arguments, backends_for, fail, find_run
from trainer.evaluation.results import headline, run_evals

MAX_EVAL_LINES = 8
"""`eval` lines shown (the newest checkpoints); `GET /v1/runs/{id}/evals` has them all."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN")
    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        _, status = find_run(backends_for(args), args.run_id)
    except BackendError as err:
        return fail("status", str(err))
    fields = {
        "run": status.run_id,
        "backend": status.backend,
        "state": status.state,
        "sweep": status.sweep_id or "-",
        "nodes": status.nodes,
        "retries": status.retries,
        "restarts": "-" if status.restarts is None else status.restarts,
        "started": status.started_at or "-",
        "finished": status.finished_at or "-",
        "exit code": "-" if status.exit_code is None else status.exit_code,
        "last step": "-" if status.last_step is None else status.last_step,
        "last loss": "-" if status.last_loss is None else f"{status.last_loss:.4f}",
    }
    if status.message:
        fields["message"] = status.message
    for key, value in fields.items():
        print(f"{key:<10} {value}")
    for summary in run_evals(status.run_dir)[-MAX_EVAL_LINES:]:
        print(f"{'eval':<10} {summary.checkpoint}: {headline(summary)}")
    return 0
