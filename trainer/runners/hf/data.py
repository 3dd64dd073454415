"""The built-in trainer's data (`trainer.data`: JSONL or prepared shards, data.format with its
loss masks, packing to data.seq_len) as the map-style datasets transformers.Trainer takes.

transformers' causal-LM loss shifts labels by one itself: a window of L+1 tokens is given as
`input_ids` with `labels` = [ignored, next-token targets...], so the model predicts exactly
the targets the built-in trainer trains on (masked ones ignored), no token lost at the end."""

from __future__ import annotations

import torch

from trainer.data import IGNORE_INDEX, SequenceSource


class WindowDataset(torch.utils.data.Dataset):
    def __init__(self, source: SequenceSource, limit: int | None = None):
        self.source = source
        self.limit = limit
        """At most this many windows (the first): an evaluation pass's size."""

    def __len__(self) -> int:
        count = int(self.source.count)
        return count if self.limit is None else min(count, self.limit)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        batch = self.source.batch(torch.tensor([index]))
        inputs, labels = batch.inputs[0], batch.labels[0]
        window = torch.cat([inputs, labels[-1:].clamp(min=0)])
        shifted = torch.cat([torch.tensor([IGNORE_INDEX]), labels])
        return {"input_ids": window, "labels": shifted}
