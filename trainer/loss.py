"""The training loss: mean next-token cross-entropy over the step's training targets.

Targets are counted across the whole optimizer step (every micro batch on every rank), so each
target weighs the same however the loss mask spreads them over micro batches and ranks: the
loss of instruction data is not skewed towards short completions, and a micro batch without a
single target adds nothing rather than NaN. With every token a target (`text`), the count is
known (global batch x seq_len) and needs no communication.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer.data import IGNORE_INDEX, Batch


def loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of the cross-entropy over the targets (labels other than IGNORE_INDEX)."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def step_targets(micro: list[Batch], device: torch.device, every_token: int) -> torch.Tensor:
    """Training targets of this optimizer step over all ranks (at least 1)."""
    if all(batch.every_label for batch in micro):
        return torch.tensor(float(every_token), device=device)
    local = sum(int((batch.labels != IGNORE_INDEX).sum()) for batch in micro)
    count = torch.tensor(float(local), device=device)
    if dist.is_initialized():
        dist.all_reduce(count)
    return count.clamp(min=1.0)
