"""AdamW, linear warmup then cosine decay, and clipping by the global gradient norm."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.optim.lr_scheduler import LambdaLR

from contract.config import TrainerConfig


def adamw_implementation(device_type: str) -> dict[str, bool]:
    """Fused (one kernel for the whole update) on CUDA; foreach (batched ops over all
    tensors) elsewhere, where fused kernels are not the tuned path."""
    return {"fused": True} if device_type == "cuda" else {"foreach": True}


def build_optimizer(model: nn.Module, cfg: TrainerConfig) -> torch.optim.AdamW:
    # Matrices decay; norm gains do not (decaying them only pulls activations towards 0).
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    implementation = adamw_implementation(params[0].device.type)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), **implementation)


def lr_factor(step: int, cfg: TrainerConfig) -> float:
    """Multiplier of the peak lr for optimizer step `step` (0-based)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    decay_steps = max(1, cfg.max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainerConfig) -> LambdaLR:
    return LambdaLR(optimizer, lambda step: lr_factor(step, cfg))


@torch.no_grad()
def clip_grad_norm(parameters: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Global L2 norm of all (sharded) gradients, clipping them to `max_norm` when > 0."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
    if isinstance(total, DTensor):
        # Each rank holds a partial norm of its shards; full_tensor() reduces across ranks.
        total = total.full_tensor()
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total, foreach=True)
    return total
