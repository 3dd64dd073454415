"""`eval.every_checkpoint` on backend=local: score each committed checkpoint of a run that has
no results yet, as `trainstack eval RUN --step N` would, once the run has trained.

`python -m jobs.backends.local.evals --run-dir DIR --report FILE --settings JSON`, started by
the run's supervisor (jobs/backends/local/supervisor.py) after torchrun exited 0, its output
appended to the run's job/output.log. Why there and then, not as each checkpoint commits:

- Here the evaluation shares the trainer's machine: lm-eval on the CPU (or the GPU the ranks
  hold) while they train would slow every step after the first checkpoint and could run the
  GPU out of memory. Once torchrun has exited, it has the machine to itself.
- The trainer never imports jobs/ (it is the image's alone), and a hook inside it would hold
  its ranks (and a cluster job's GPUs) while lm-eval runs. The supervisor already sees the
  run end, outlives the shell that launched it and records the outcome in job/state.json.
- Its own process: lm-eval's start-up (torch, transformers, the task index) is paid once for
  all the checkpoints, a crash or an out-of-memory kill leaves the supervisor to record it,
  and `trainstack cancel` stops it with SIGTERM.

Each checkpoint's results land where `trainstack eval` puts them (`<run_dir>/eval/step-N/`,
results.json last); one that fails is one line here and in the report, and the others are
still scored. The report (JSON, rewritten after each checkpoint) is what the supervisor
reads back: `{"pending": [steps], "scored": [steps], "failed": [[step, line]]}`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from jobs.backends import run_state
from trainer.checkpoint.layout import committed_steps
from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig, check_eval_config
from trainer.evaluation.results import EVAL_DIR, RESULTS_FILE, eval_name, headline
from trainer.storage import RunStorage, StorageError, open_run_storage

PREFIX = "[eval]"
"""Every line this process prints starts with it (the run's output.log mixes it with torchrun's)."""


def unscored_steps(storage: RunStorage) -> list[int]:
    """Committed checkpoints (oldest first) without results of their export: an evaluation
    cut short (no results.json) or only through an endpoint counts as none."""
    try:
        names = set(storage.list_dir(EVAL_DIR))
    except StorageError:
        names = set()
    return [
        step
        for step in committed_steps(storage)
        if (name := eval_name(step, via_endpoint=False)) not in names
        or not storage.exists(f"{EVAL_DIR}/{name}/{RESULTS_FILE}")
    ]


def _say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def write_report(path: Path, report: dict[str, Any]) -> None:
    run_state.write_atomic(path, json.dumps(report) + "\n")


def evaluate_unscored(run_dir: str, settings: EvalConfig, report_path: Path) -> int:
    """0: every checkpoint found unscored was scored (or there was none); 1: one or more
    failed (each named in the report); 2: the settings or the run dir could not be read."""
    report: dict[str, Any] = {"pending": [], "scored": [], "failed": []}
    write_report(report_path, report)
    try:
        check_eval_config(settings)
        pending = unscored_steps(open_run_storage(run_dir))
    except (ConfigError, StorageError) as exc:
        report["failed"].append([None, _one_line(exc)])
        write_report(report_path, report)
        _say(f"not evaluated: {_one_line(exc)}")
        return 2
    report["pending"] = pending
    write_report(report_path, report)
    if not pending:
        _say("every committed checkpoint has results already")
        return 0
    _say(f"scoring {len(pending)} checkpoint(s): steps {', '.join(map(str, pending))}")
    # lazy: torch, transformers and lm-eval (seconds), once nothing above refused
    from trainer.evaluation.harness import evaluate_run
    from trainer.evaluation.tasks import task_manager

    try:
        manager = task_manager(settings)
    except ConfigError as exc:  # an unknown task name: no checkpoint can be scored
        report["failed"] = [[step, _one_line(exc)] for step in pending]
        write_report(report_path, report)
        _say(f"not evaluated: {exc}")
        return 1
    for step in pending:
        try:
            outcome = evaluate_run(run_dir, settings, step=step, manager=manager)
        except Exception as exc:  # lm-eval's own errors are many: each is this step's line
            report["failed"].append([step, _one_line(exc)])
            _say(f"step {step} failed: {_one_line(exc)}")
        else:
            report["scored"].append(step)
            _say(
                f"step {step} in {outcome.seconds:.1f} s: {headline(outcome.summary)}; "
                f"results in {outcome.destination}"
            )
        write_report(report_path, report)
    return 1 if report["failed"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.backends.local.evals")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--report", required=True, type=Path)
    parser.add_argument("--settings", required=True, help="EvalConfig's fields as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        settings = EvalConfig(**json.loads(args.settings))
    except (ValueError, TypeError) as exc:
        write_report(args.report, {"pending": [], "scored": [], "failed": [[None, str(exc)]]})
        _say(f"not evaluated: --settings: {_one_line(exc)}")
        return 2
    code = evaluate_unscored(args.run_dir, settings, args.report)
    _say(f"done in {time.monotonic() - started:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
