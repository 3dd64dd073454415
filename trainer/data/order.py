"""The order training visits packed sequences in: a function of the seed and the sample index.

Training visits the sequences in a seeded permutation per epoch, and global sample index g
always means the same sequence: step s consumes indices [s*G, (s+1)*G) for a global batch G,
and each rank takes its own disjoint rows. The data position is therefore a single counter
(samples consumed) — resume is exact, and N ranks can hand over to M.
"""

from __future__ import annotations

import torch

from trainer.data.packing import Batch, PackedSequences


class TrainBatches:
    """The micro batches of one rank for the optimizer step that starts at global index `start`."""

    def __init__(self, sequences: PackedSequences, *, seed: int, dp_rank: int, dp_size: int):
        self.sequences, self.seed = sequences, seed
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self._perm_epoch, self._perm = -1, torch.empty(0, dtype=torch.int64)

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._perm_epoch:
            generator = torch.Generator().manual_seed(self.seed * 7919 + epoch)
            self._perm = torch.randperm(self.sequences.count, generator=generator)
            self._perm_epoch = epoch
        return self._perm

    def sequence_ids(self, global_indices: torch.Tensor) -> torch.Tensor:
        count = self.sequences.count
        out = torch.empty_like(global_indices)
        for epoch in global_indices.div(count, rounding_mode="floor").unique().tolist():
            mask = global_indices // count == epoch
            out[mask] = self._permutation(epoch)[global_indices[mask] % count]
        return out

    def micro_batches(self, start: int, micro_batch_size: int, accum_steps: int) -> list[Batch]:
        """Micro batch m of rank r holds global rows m*(micro*dp) + r*micro + [0, micro)."""
        batches = []
        for micro in range(accum_steps):
            first = start + (micro * self.dp_size + self.dp_rank) * micro_batch_size
            rows = torch.arange(first, first + micro_batch_size)
            batches.append(self.sequences.batch(self.sequence_ids(rows)))
        return batches


def eval_batches(
    sequences: PackedSequences, *, dp_rank: int, dp_size: int, micro_batch_size: int, count: int
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
