"""What keeps sweeps cheap for everyone: one sweep submission at a time per user, and a sweep
posted again unchanged answered from what the service already submitted for it.

A 64-point sweep costs about half a minute of a worker (every point composed under the lock
all requests share, then validated); posting it again, with every point still active, cost
the same for an answer of 64 `already active`. The ledger keeps the answers of the last
MAX_REMEMBERED_POINTS points, keyed by their exact overrides (who asked included): while every run
of one is still active on the cluster, the same request gets the same answer without
composing anything.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MAX_SWEEPS_PER_CALLER = 1
"""Sweep submissions one user (all their tokens) may have in flight (429 past it)."""
MAX_REMEMBERED_POINTS = 4096
"""Points whose answers are kept, over all sweeps (oldest sweep forgotten first): about 1 KB
each (the plan), so a few MB at most."""


class SweepBusy(Exception):
    """str() is the one line the API answers with 429."""


class SweepLedger:
    def __init__(
        self, per_caller: int = MAX_SWEEPS_PER_CALLER, remembered: int = MAX_REMEMBERED_POINTS
    ):
        self.per_caller = per_caller
        self.remembered = remembered
        self._points = 0
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._answers: OrderedDict[tuple[str, ...], list[Any]] = OrderedDict()

    @contextmanager
    def slot(self, user: str) -> Iterator[None]:
        """Held while one of `user`'s sweeps is prepared and submitted; SweepBusy when they
        already hold `per_caller`."""
        with self._lock:
            held = self._in_flight.get(user, 0)
            if held >= self.per_caller:
                raise SweepBusy(
                    f"sweeps: {held} of yours being submitted; allowed: {self.per_caller} at a "
                    "time (wait for its answer)"
                )
            self._in_flight[user] = held + 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight[user] -= 1
                if not self._in_flight[user]:
                    del self._in_flight[user]

    def remember(self, overrides: list[str], answers: list[Any]) -> None:
        key = tuple(overrides)
        with self._lock:
            self._points += len(answers) - len(self._answers.pop(key, ()))
            self._answers[key] = answers
            while self._points > self.remembered and len(self._answers) > 1:
                self._points -= len(self._answers.popitem(last=False)[1])

    def recall(self, overrides: list[str]) -> list[Any] | None:
        """The answers given to these exact overrides, if the ledger still has them."""
        with self._lock:
            return self._answers.get(tuple(overrides))
