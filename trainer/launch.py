"""`python -m trainer.launch [torchrun options] -m trainer --config ...`: torchrun that keeps
the trainer's exit codes.

torchrun exits 1 whenever a worker fails, and also when it is itself stopped by SIGTERM — even
though the trainer then checkpointed and exited 143 — so a pod running plain torchrun cannot
tell "restart me" (143) from "fix me" (2). This runs the same launcher in-process (same options,
same SIGTERM forwarding to the workers) and maps the outcome:

- 143 (`EXIT_PREEMPTED`) when the launcher got SIGTERM, or the first worker to fail exited 143
  (or died of SIGTERM);
- 2 (`EXIT_BAD_INPUT`) when the first worker to fail exited 2;
- otherwise 0 when done, 1 for any other failure, 128+N when the launcher got signal N.

Only the FIRST failure counts: once a worker fails, torchrun stops the others with SIGTERM, so
their codes say nothing about the cause.
"""

from __future__ import annotations

import signal
import sys

from trainer.config import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_PREEMPTED


def exit_code_for(first_failure_code: int) -> int:
    """The job's exit code from the exit code of the first worker that failed."""
    if first_failure_code in (EXIT_PREEMPTED, -signal.SIGTERM):
        return EXIT_PREEMPTED
    if first_failure_code == EXIT_BAD_INPUT:
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(argv)
    except SignalException as exc:
        return EXIT_PREEMPTED if exc.sigval == signal.SIGTERM else 128 + int(exc.sigval)
    except ChildFailedError as exc:
        _, first = exc.get_first_failure()
        return exit_code_for(first.exitcode)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
