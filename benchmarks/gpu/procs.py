"""Ending a process and everything it started (stdlib only: the orchestrator uses it too)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from tests.trainer.harness import descendants


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL `proc` (started with start_new_session=True), its process group and everything
    under it: torchrun starts each worker in a session of its own."""
    below = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
