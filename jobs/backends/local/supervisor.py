"""Supervisor of one local run: `python -m jobs.backends.local.supervisor STATE_DIR`.

Started detached by the local backend. Runs torchrun with the request in job/request.json,
appends its output to job/output.log and records pid, state and exit code in job/state.json,
so the run's outcome is known even when the shell that launched it is gone.
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
    run_state.update_state(
        state_dir,
        state=state,
        exit_code=code,
        finished_at=run_state.utc_now(),
        torchrun_seconds=torchrun_seconds,
        message=message,
    )
    return code


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
