"""SIGTERM handling: note the signal, let the loop stop at a step boundary that all ranks agree on.

Spot reclaims, evictions and `kubectl delete` send SIGTERM (torchrun forwards it to every
worker), but not necessarily to all ranks at the same instant. Each step the loop all-reduces
the local flag (MAX), so every rank stops after the same step and writes the same checkpoint.
The same all-reduce carries whether this rank's async checkpoint write has finished.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist


class StopSignal:
    """Catches SIGTERM from `arm()` on (the loop is about to start). Before that SIGTERM
    keeps its default action and ends the process at once: there is nothing to checkpoint
    yet, and a Python handler cannot run while a rank is stuck in C++ (e.g. connecting to a
    peer that died), which would make torchrun wait out its shutdown timeout to restart."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def arm(self) -> None:
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = True

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def agree(stop_requested: bool, write_pending: bool, group: dist.ProcessGroup | None = None):
    """(any rank asked to stop, any rank still writing its async checkpoint) — one all-reduce."""
    flags = torch.tensor([float(stop_requested), float(write_pending)])
    dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=group)
    return bool(flags[0]), bool(flags[1])
