"""`torchrun --nproc_per_node=N -m trainer --config PATH [key=value ...]` (or `python -m trainer`).

Exit codes (contract.config): 0 done, 2 bad input (one line on stderr, nothing written),
143 stopped by SIGTERM after writing a checkpoint (run again to resume), 1 a failure — among
them checkpoints that fail to save or to load (one line on stderr).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

from contract.config import EXIT_BAD_INPUT, EXIT_FAILED
from trainer.errors import ConfigError
from trainer.lifeline import AGENT_PID_ENV, die_with_parent
from trainer.run_config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="the job's YAML (RunConfig)")
    parser.add_argument("overrides", nargs="*", help="key=value, e.g. trainer.max_steps=100")
    args = parser.parse_args(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker: never outlive the agent
        die_with_parent(parent=int(os.environ.get(AGENT_PID_ENV) or 0) or None)
    from trainer.checkpoint import CheckpointError  # lazy: torch, after die_with_parent
    from trainer.distributed import env_rank  # lazy: torch, after die_with_parent
    from trainer.train import run  # lazy: torch, after die_with_parent

    try:
        return run(load_config(args.config, args.overrides))
    except ConfigError as exc:
        say_once(env_rank(), str(exc))  # every rank finds the same problem
        return EXIT_BAD_INPUT
    except CheckpointError as exc:
        say_once(env_rank(), str(exc))  # every rank agreed on it
        return EXIT_FAILED


PEER_REPORT_WAIT_S = 20.0
"""How long a rank other than 0 leaves rank 0 to report a problem they share."""


def say_once(rank: int, problem: str) -> None:
    """One `error:` line for a problem every rank meets. Rank 0 says it. Another rank that
    exited at once could be the first failure torchrun sees, and torchrun would then stop
    rank 0 with SIGTERM before its line is out (and report the other rank's code). So the
    others wait: rank 0 exits, torchrun ends them with SIGTERM (its default action, restored
    here). A rank still running after the wait met the problem alone (or runs on a node
    without rank 0) and says it itself."""
    if rank != 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        time.sleep(PEER_REPORT_WAIT_S)
    print(f"error: {problem}", file=sys.stderr, flush=True)


def exit_now(code: int) -> None:
    """End the process without the interpreter's teardown. Gloo's worker threads may still be
    dropping a finished collective's tensors, which takes the GIL; during teardown that aborts
    the process (SIGABRT, exit 134 instead of the trainer's code: pytorch/pytorch#190489).
    Everything the run owns is closed by now (checkpoints settled, metrics flushed), so only
    the standard streams and logging are left to flush."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
