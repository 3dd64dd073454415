"""Supervisor of one local run: `python -m jobs.backends.local.supervisor STATE_DIR`.

Started detached by the local backend. Runs torchrun with the request in job/request.json,
appends its output to job/output.log and records pid, state and exit code in job/state.json,
so the run's outcome is known even when the shell that launched it is gone. With
`eval.every_checkpoint` (the request's `eval_argv`), once torchrun exited 0 it scores the
run's checkpoints (jobs.backends.local.evals says why here and then): the run is recorded
succeeded first, `evals` says how the scoring went, and a failed one is the run's message in
one line, never a failed run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from contract.config import EXIT_PREEMPTED
from jobs.backends import run_state
from jobs.backends.base import CANCELLED, FAILED, RUNNING, SUCCEEDED
from trainer.lifeline import die_with_parent


def outcome(exit_code: int, cancel_requested: bool) -> str:
    if exit_code == 0:
        return SUCCEEDED
    if cancel_requested:
        return CANCELLED
    return FAILED


def _prepare_torchrun() -> None:
    """In the child before exec. Ignored signals survive exec: give torchrun back the defaults
    it expects. And if this supervisor dies (SIGKILL, OOM), torchrun gets SIGTERM, which it
    forwards to the ranks (they checkpoint and exit): no rank trains on unsupervised."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent(signal.SIGTERM)


def supervise(state_dir: Path) -> int:
    run_state.update_state(state_dir, supervisor_pid=os.getpid())
    request = json.loads((state_dir / run_state.REQUEST_FILE).read_text())
    # A cancel SIGTERMs torchrun only; ignore strays so the outcome is always recorded.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with (state_dir / run_state.OUTPUT_LOG).open("ab") as log:
        proc = subprocess.Popen(
            request["argv"],
            cwd=request["cwd"],
            env={**os.environ, **request["env"]},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_prepare_torchrun,
        )
        started = time.monotonic()
        run_state.update_state(state_dir, state=RUNNING, pid=proc.pid)
        if (state_dir / run_state.CANCEL_MARKER).exists():  # cancelled before it had a pid
            proc.terminate()
        code = proc.wait()
        torchrun_seconds = round(time.monotonic() - started, 3)
    if code < 0:  # killed by a signal: report it the way a shell (and a pod) would
        code = 128 - code
    cancelled = (state_dir / run_state.CANCEL_MARKER).exists()
    state = outcome(code, cancelled)
    message = (
        f"stopped after checkpoint (exit {EXIT_PREEMPTED}): launch again to resume"
        if (code == EXIT_PREEMPTED and state != SUCCEEDED)
        else ""
    )
    evaluate = state == SUCCEEDED and bool(request.get("eval_argv"))
    run_state.update_state(
        state_dir,
        state=state,
        exit_code=code,
        finished_at=run_state.utc_now(),
        torchrun_seconds=torchrun_seconds,
        message=EVALUATING if evaluate else message,
        **({"evals": RUNNING} if evaluate else {}),
    )
    if evaluate:
        score_checkpoints(state_dir, request)
    return code


EVALUATING = "eval: scoring the committed checkpoints (eval.every_checkpoint)"
MAX_MESSAGE = 400


def score_checkpoints(state_dir: Path, request: dict) -> None:
    """The request's `eval_argv`, its output appended to the run's log; its outcome goes
    into state.json (`evals`, `eval_seconds`, `eval_exit_code`, the message)."""
    started = time.monotonic()
    with (state_dir / run_state.OUTPUT_LOG).open("ab") as log:
        try:
            proc = subprocess.Popen(
                request["eval_argv"],
                cwd=request["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_prepare_torchrun,
            )
        except (OSError, subprocess.SubprocessError, TypeError) as exc:
            run_state.update_state(
                state_dir, evals=FAILED, message=f"eval: did not start ({exc})"[:MAX_MESSAGE]
            )
            return
        run_state.update_state(state_dir, eval_pid=proc.pid)
        if (state_dir / run_state.CANCEL_MARKER).exists():  # cancelled before it had a pid
            proc.terminate()
        code = proc.wait()
    if code < 0:
        code = 128 - code
    cancelled = (state_dir / run_state.CANCEL_MARKER).exists()
    report = _read_report(state_dir)
    outcome = SUCCEEDED if code == 0 else (CANCELLED if cancelled else FAILED)
    run_id = str((run_state.read_state(state_dir) or {}).get("run_id") or "RUN")
    seconds = time.monotonic() - started
    run_state.update_state(
        state_dir,
        evals=outcome,
        eval_exit_code=code,
        eval_seconds=round(seconds, 3),
        eval_pid=None,
        message=eval_message(outcome, code, report, seconds, run_id),
    )


def _read_report(state_dir: Path) -> dict:
    """The evaluator's report; {} when it wrote none (or not JSON: the run's own files)."""
    try:
        report = json.loads((state_dir / run_state.EVAL_REPORT).read_text()[:1_000_000])
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def eval_message(outcome: str, code: int, report: dict, seconds: float, run_id: str) -> str:
    """The run's message once its checkpoints were scored: one line."""
    pending = report.get("pending") if isinstance(report.get("pending"), list) else []
    scored = report.get("scored") if isinstance(report.get("scored"), list) else []
    failed = report.get("failed") if isinstance(report.get("failed"), list) else []
    if outcome == CANCELLED:
        text = f"eval: cancelled after {len(scored)} of {len(pending)} checkpoint(s) scored"
    elif outcome == SUCCEEDED:
        text = (
            f"eval: {len(scored)} checkpoint(s) scored in {seconds:.0f} s"
            if scored
            else "eval: every committed checkpoint had results already"
        )
    elif failed and isinstance(failed[0], list) and len(failed[0]) == 2:
        step, line = failed[0]
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        where = "before any checkpoint" if step is None else f"first step {step}"
        again = f" --step {step}" if step is not None else ""
        text = (
            f"eval: {len(failed)} of {max(len(pending), len(failed))} checkpoint(s) failed, "
            f"{where}: {' '.join(str(line).split())}; `trainstack eval {run_id}{again} "
            "eval.tasks=...` scores it again"
        )
    else:
        text = (
            f"eval: stopped with exit {code} after {len(scored)} of {len(pending)} "
            f"checkpoint(s) scored; `trainstack logs {run_id}` shows why"
        )
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
