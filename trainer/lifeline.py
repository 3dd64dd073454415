"""Die with the parent: a rank whose launcher (torchrun's agent) is gone must not train on.

torchrun starts every worker in its own session, so when the agent is SIGKILLed (OOM killer,
`kill -9`, a supervisor's process group torn down) nothing signals the ranks: they keep
training unsupervised, write into the run dir and hold the rendezvous port until a collective
times out. Linux's parent-death signal ends them with their parent instead; a relaunch then
resumes from the last committed checkpoint.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent thread exits."""


AGENT_PID_ENV = "TRAINSTACK_AGENT_PID"
"""Set by `trainer.launch` for its workers: the pid their parent must have."""


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies; end at once if the
    parent is already gone — it may die before the request lands (start-up takes seconds):
    `parent` is the pid it should have, else the one it has now. False where unsupported
    (not Linux): there the caller's own supervision is all there is."""
    if not sys.platform.startswith("linux"):
        return False
    parent = parent or os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # reparented: the parent died already
        os.kill(os.getpid(), sig)
    return True
