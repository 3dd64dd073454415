"""The order training visits sequences in: a function of the seed and the sample index.

Step s consumes global sample indices [s*G, (s+1)*G) for a global batch G, and each rank takes
its own disjoint rows. Global sample g is assigned a source by the mixture schedule (one
source: all of them), becomes that source's k-th sample, and the k-th sample of a source of n
sequences is sequence Bijection(n, seed, epoch=k // n)(k % n): a seeded permutation per epoch
computed per index, with nothing held in memory. The data position is therefore a single
counter (samples consumed): resume is exact, and N ranks can hand over to M.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from trainer.data.bijection import Bijection
from trainer.data.mixture import MixtureSchedule
from trainer.data.packing import Batch
from trainer.data.sources import SequenceSource, concat_batches

PREFETCH_STEPS = 8
"""Optimizer steps read ahead (a remote source fetches their rows in the background)."""


class TrainBatches:
    """The micro batches of one rank for the optimizer step that starts at global index `start`."""

    def __init__(
        self,
        sources: SequenceSource | list[SequenceSource],
        *,
        seed: int,
        dp_rank: int,
        dp_size: int,
        weights: list[float] | None = None,
    ):
        self.sources = sources if isinstance(sources, list) else [sources]
        self.schedule = MixtureSchedule(weights or [1.0] * len(self.sources))
        self.seed, self.dp_rank, self.dp_size = seed, dp_rank, dp_size
        self._orders: dict[tuple[int, int], Bijection] = {}
        self._prefetched_until = 0

    def _order(self, source: int, epoch: int) -> Bijection:
        key = (source, epoch)
        if key not in self._orders:
            if len(self._orders) > 8:
                self._orders.clear()
            # source 0 keeps the seed itself; each further source gets its own stream
            self._orders[key] = Bijection(
                self.sources[source].count, self.seed + 1_000_003 * source, epoch
            )
        return self._orders[key]

    def locate(self, global_indices: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(source, sequence id within it) of global sample indices."""
        source, local = self.schedule.locate(global_indices.numpy())
        ids = np.empty_like(local)
        for k in np.unique(source).tolist():
            rows = source == k
            count = self.sources[k].count
            epochs, within = np.divmod(local[rows], count)
            out = np.empty_like(within)
            for epoch in np.unique(epochs).tolist():
                same = epochs == epoch
                out[same] = self._order(k, epoch)(within[same])
            ids[rows] = out
        return source, ids

    def sequence_ids(self, global_indices: torch.Tensor) -> torch.Tensor:
        """Sequence ids of a single-source run."""
        return torch.from_numpy(self.locate(global_indices)[1])

    def _rows(self, start: int, micro_batch_size: int, micro: int) -> torch.Tensor:
        """Micro batch m of rank r holds global rows m*(micro*dp) + r*micro + [0, micro)."""
        first = start + (micro * self.dp_size + self.dp_rank) * micro_batch_size
        return torch.arange(first, first + micro_batch_size)

    def _batch(self, rows: torch.Tensor) -> Batch:
        source, ids = self.locate(rows)
        if len(self.sources) == 1:
            return self.sources[0].batch(torch.from_numpy(ids))
        parts = [
            self.sources[k].batch(torch.from_numpy(ids[r : r + 1]))
            for r, k in enumerate(source.tolist())
        ]
        # Whether a step's targets need counting (a collective) must not depend on which
        # sources this rank's rows came from: in a mixture, every rank counts them.
        return dataclasses.replace(concat_batches(parts), every_label=False)

    def prefetch(self, start: int, micro_batch_size: int, accum_steps: int) -> None:
        """Hint the sources with this rank's rows of the step starting at `start`."""
        rows = torch.cat([self._rows(start, micro_batch_size, m) for m in range(accum_steps)])
        source, ids = self.locate(rows)
        for k in np.unique(source).tolist():
            self.sources[k].prefetch(torch.from_numpy(ids[source == k]))

    def micro_batches(self, start: int, micro_batch_size: int, accum_steps: int) -> list[Batch]:
        step = micro_batch_size * accum_steps * self.dp_size
        # Each step hints the one step that came into the window (all of them after a jump).
        first = max(start + step, self._prefetched_until)
        if not start < first - step <= start + PREFETCH_STEPS * step:
            first = start + step
        for ahead in range(first, start + (PREFETCH_STEPS + 1) * step, step):
            self.prefetch(ahead, micro_batch_size, accum_steps)
        self._prefetched_until = start + (PREFETCH_STEPS + 1) * step
        return [self._batch(self._rows(start, micro_batch_size, m)) for m in range(accum_steps)]

    def tokens_by_source(self, samples_seen: int, seq_len: int) -> list[int]:
        """Training tokens each source gave to the first `samples_seen` global samples."""
        return [n * seq_len for n in self.schedule.samples_before(samples_seen)]


def eval_batches(
    sequences: SequenceSource,
    *,
    dp_rank: int,
    dp_size: int,
    micro_batch_size: int,
    count: int,
) -> list[Batch]:
    """The same held-out rows at every evaluation, split disjointly across ranks.

    The rows are spread evenly over the held-out stream rather than taken from its start: with
    a loss mask, the first rows may all lie in one long prompt and hold no target at all.
    """
    if sequences.count == 0:
        return []
    total = count * dp_size * micro_batch_size
    spread = (torch.arange(total) * sequences.count) // total
    if total > sequences.count:
        spread = torch.arange(total) % sequences.count
    batches = []
    for micro in range(count):
        first = (micro * dp_size + dp_rank) * micro_batch_size
        batches.append(sequences.batch(spread[first : first + micro_batch_size]))
    return batches
