"""A big sweep's points prepared in worker processes, the way Hydra's joblib launcher composes
its jobs: each worker composes (`load_sweep_config`) and materializes a contiguous run of
points, and the launcher takes them back in order. Composing a point costs about 75 ms of
CPU, so a 1,000-point batch took over a minute on one core.

Workers are forked (Linux): they start with the launcher's Hydra state (config loader,
ConfigStore, resolvers) as it is, nothing to rebuild or pickle but the points coming back.
Preparation writes nothing, so a worker that fails leaves nothing behind; the first bad point
in order is raised as in one process, and the runs after it are cancelled.
"""

from __future__ import annotations

import gc
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

from jobs.sweep_points import SweepPointError

PARALLEL_FROM = 32
"""Batches smaller than this are prepared in the launcher's process: starting workers and
sending points back costs more than it saves."""
MAX_WORKERS = 8

_BATCH: Any = None
"""The BatchPreparation the forked workers read (set while a pool runs)."""


def workers_for(points: int, requested: int) -> int:
    """`hydra.launcher.workers`: 0 picks one per CPU (at most 8) for a batch of at least
    PARALLEL_FROM points where processes can be forked, else 1; n > 0 is taken as given."""
    if requested:
        return requested
    if points < PARALLEL_FROM or not sys.platform.startswith("linux"):
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


Numbered = list[tuple[int, list[str]]]
"""Points as (Hydra job number, overrides)."""


def prepared_in_workers(batch: Any, numbered: Numbered, workers: int) -> Iterator:
    """PreparedPoints of `numbered` ((index, overrides) in order), in order."""
    import multiprocessing  # lazy: start-up time; worker processes for a batch of 32+ only
    from concurrent.futures import ProcessPoolExecutor  # lazy: as multiprocessing

    global _BATCH
    size = max(1, math.ceil(len(numbered) / (workers * 4)))  # a few runs per worker: balance
    runs = [numbered[first : first + size] for first in range(0, len(numbered), size)]
    _BATCH = batch
    try:
        context = multiprocessing.get_context("fork")
        # A forked worker's collector would walk (and so copy) every object it inherited.
        with ProcessPoolExecutor(workers, mp_context=context, initializer=gc.freeze) as pool:
            futures = [pool.submit(_prepare_run, run) for run in runs]
            try:
                for future in futures:
                    points, failure = future.result()
                    yield from points
                    if failure is not None:
                        raise SweepPointError(*failure)
            finally:
                for future in futures:
                    future.cancel()
    finally:
        _BATCH = None


def _prepare_run(run: Numbered) -> tuple[list, tuple | None]:
    """In a worker: the run's points up to its first bad one, and that one's (index,
    overrides, message) — sent back as data, the exception's own arguments being its text."""
    points = []
    for index, overrides in run:
        try:
            points.append(_BATCH.prepare(index, overrides))
        except SweepPointError as err:
            return points, (index, overrides, err.reason)
    return points, None
