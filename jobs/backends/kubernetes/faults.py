"""Fault injection for tests of the Training API, off unless its environment variable is set.

- TRAINSTACK_FAULT_API_PAUSE=<point>: the thread reaching `point` prints
  "[trainstack] fault injection: paused at <point>" on stderr and sleeps forever, so a test can
  SIGKILL the service there, deterministically. Points: `submit:companions` (a run's ConfigMap
  and NetworkPolicy created, its job not yet), `sweep:after-point-<n>` (point n of a sweep
  submitted, the next not yet).
- TRAINSTACK_FAULT_RECOVER_AFTER_S=<seconds>: how old another submitter's leftovers must be
  before a starting service takes them for a crash's (jobs.api.sweep_journal.STALE_S).
"""

from __future__ import annotations

import os
import sys
import time

PAUSE_ENV = "TRAINSTACK_FAULT_API_PAUSE"
RECOVER_AFTER_ENV = "TRAINSTACK_FAULT_RECOVER_AFTER_S"


def maybe_pause(point: str) -> None:
    if os.environ.get(PAUSE_ENV) == point:
        print(f"[trainstack] fault injection: paused at {point}", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)
