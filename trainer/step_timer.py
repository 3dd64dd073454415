"""Where a step's time goes: data wait, forward+backward, optimizer and checkpoint stall.

CUDA runs kernels asynchronously: without a synchronize, a phase's clock stops when its work
is queued, and the time lands in whichever later call waits for it (or nowhere). So each
phase closes after a device synchronize — the figures are wall time of finished work. The
synchronizes cost a little overlap between phases; that is the price of honest figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

PHASES = ("data_wait", "forward_backward", "optimizer", "checkpoint_stall")


def device_synchronize(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None  # CPU ops have finished when they return


class StepTimer:
    """Sums each phase's seconds over a logging window."""

    def __init__(
        self,
        synchronize: Callable[[], None],
        clock: Callable[[], float] = time.perf_counter,
    ):
        self._synchronize, self._clock = synchronize, clock
        self._totals = dict.fromkeys(PHASES, 0.0)
        self.steps = 0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = self._clock()
        try:
            yield
        finally:
            self._synchronize()
            self._totals[name] += self._clock() - started

    def step_done(self) -> None:
        self.steps += 1

    @property
    def seconds(self) -> float:
        """Wall time of the window's steps so far."""
        return sum(self._totals.values())

    def close_window(self) -> dict[str, float]:
        """Mean seconds per step of each phase and of the whole step, named `time/<what>_s`;
        starts a new window."""
        steps = max(self.steps, 1)
        figures = {f"time/{name}_s": total / steps for name, total in self._totals.items()}
        figures["time/step_s"] = self.seconds / steps
        self._totals = dict.fromkeys(PHASES, 0.0)
        self.steps = 0
        return figures
