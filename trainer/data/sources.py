"""The one interface between data and the training step: a `SequenceSource` is `count`
fixed-length sequences, any of which `batch(ids)` turns into a `Batch`.

`PackedSequences` (a small JSONL file, tokenized in memory) and `PreparedSequences` (token
shards, memory-mapped or read from S3 by byte range) both implement it, so `TrainBatches`,
evaluation and the step never know which one they read.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from trainer.data.packing import Batch


@runtime_checkable
class SequenceSource(Protocol):
    count: int
    """Sequences (windows of seq_len + 1 tokens) in the source."""

    def batch(self, indices: torch.Tensor) -> Batch:
        """Rows `indices` (int64, in [0, count)) as one batch, in the order given."""
        ...

    def prefetch(self, indices: torch.Tensor) -> None:
        """A hint: these rows are read soon (a remote source starts fetching them)."""
        ...


def concat_batches(batches: list[Batch]) -> Batch:
    """Rows of several batches (of one seq_len) stacked in order; a batch without positions
    or documents gets the plain ones (0..L-1, one document)."""
    if len(batches) == 1:
        return batches[0]
    inputs = torch.cat([b.inputs for b in batches])
    labels = torch.cat([b.labels for b in batches])
    every_label = all(b.every_label for b in batches)
    if all(b.positions is None and b.documents is None for b in batches):
        return Batch(inputs, labels, every_label=every_label)
    length = inputs.shape[1]
    positions = torch.cat(
        [
            b.positions if b.positions is not None else torch.arange(length).expand_as(b.inputs)
            for b in batches
        ]
    )
    documents = torch.cat(
        [b.documents if b.documents is not None else torch.zeros_like(b.inputs) for b in batches]
    )
    return Batch(inputs, labels, positions, documents, every_label)


class ConcatSequences:
    """Several sources one after another (the held-out rows of a mixture)."""

    def __init__(self, sources: list[SequenceSource]):
        self.sources = sources
        self.starts = torch.tensor([0, *[s.count for s in sources]]).cumsum(0)
        self.count = int(self.starts[-1])

    def batch(self, indices: torch.Tensor) -> Batch:
        which = torch.searchsorted(self.starts, indices, right=True) - 1
        parts = []
        for row in range(len(indices)):
            k = int(which[row])
            parts.append(self.sources[k].batch(indices[row : row + 1] - self.starts[k]))
        return concat_batches(parts)

    def prefetch(self, indices: torch.Tensor) -> None:
        pass
