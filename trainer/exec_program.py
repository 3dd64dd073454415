"""The last thing a wrapper in the pod does: replace itself with the program it wraps
(`trainer.pod_starts`, `trainer.runner_exec`), so the program gets the wrapper's pid, signals and
exit code. Torch-free and small: both wrappers start before anything heavy."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from contract.config import EXIT_BAD_INPUT


def exec_program(program: list[str], say: Callable[[str], None]) -> int:
    """Flush what this process printed, then become `program` (looked up on PATH). Returns only
    when it cannot be started: one line through `say` and EXIT_BAD_INPUT (not retried)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        say(f"cannot start {program[0]!r}: {exc.strerror or exc}")
    return EXIT_BAD_INPUT
