"""Fault injection for tests, off unless its environment variable is set.

- TRAINSTACK_FAULT_PAUSE_BEFORE_COMMIT=<step>: rank 0 prints
  "[trainer] fault injection: paused before committing step <step>" and sleeps forever once
  every rank has written that checkpoint's shards and metadata, before the COMMITTED marker —
  so a test can SIGKILL the run in the middle of a checkpoint, deterministically.
- TRAINSTACK_FAULT_STEP_DELAY_S=<seconds>: sleep after every optimizer step, so a test can
  deliver SIGTERM while the run is surely still training.
"""

from __future__ import annotations

import os
import time

PAUSE_BEFORE_COMMIT_ENV = "TRAINSTACK_FAULT_PAUSE_BEFORE_COMMIT"
STEP_DELAY_ENV = "TRAINSTACK_FAULT_STEP_DELAY_S"


def maybe_pause_before_commit(step: int) -> None:
    if os.environ.get(PAUSE_BEFORE_COMMIT_ENV) == str(step):
        print(f"[trainer] fault injection: paused before committing step {step}", flush=True)
        while True:
            time.sleep(60)


def maybe_delay_step() -> None:
    delay = float(os.environ.get(STEP_DELAY_ENV) or 0)
    if delay > 0:
        time.sleep(delay)
