"""LoRA: low-rank adapters added to chosen projections of a frozen base model.

A targeted `nn.Linear` becomes a `LoRALinear`: the same module (its weight keeps its name, so
loading and export see the base unchanged) plus `lora_a` (rank x in) and `lora_b` (out x rank)
whose product, scaled by alpha / rank, is added to its output, as peft's LoRA layer computes
it. `targets` are Hugging Face module names (q_proj, ..., down_proj): the family's tensor
names map them to the trainer's modules. Only the adapters require gradients.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from contract.model.families import PROJECTIONS

ADAPTER_MARK = ".lora_"
"""In every adapter parameter's name, and in no base parameter's."""


class LoRALinear(nn.Linear):
    """`nn.Linear` + scale * lora_b(lora_a(dropout(x)))."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float):
        super().__init__(
            base.in_features,
            base.out_features,
            bias=base.bias is not None,
            device=base.weight.device,
            dtype=base.weight.dtype,
        )
        self.lora_a = nn.Linear(base.in_features, rank, bias=False, device=base.weight.device)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False, device=base.weight.device)
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.linear(x, self.weight, self.bias)
        adapter = self.lora_b(self.lora_a(self.dropout(x).to(self.lora_a.weight.dtype)))
        return base + (adapter * self.scale).to(base.dtype)


def add_lora(model: nn.Module, rank: int, alpha: float, dropout: float, targets: list[str]) -> None:
    """Swap each block's targeted projections for `LoRALinear`s and freeze everything else.
    Call on the meta model, before `parallelize`; `make_plan` has checked the settings."""
    suffixes = [PROJECTIONS[t] for t in targets]
    for block in model.layers:  # type: ignore[attr-defined]
        for suffix in suffixes:
            parent_path, _, name = suffix.rpartition(".")
            parent = block.get_submodule(parent_path)
            setattr(parent, name, LoRALinear(getattr(parent, name), rank, alpha, dropout))
    for name, param in model.named_parameters():
        param.requires_grad_(ADAPTER_MARK in name)


def is_adapter(name: str) -> bool:
    return ADAPTER_MARK in name


def has_adapters(model: nn.Module) -> bool:
    return any(isinstance(m, LoRALinear) for m in model.modules())


def adapter_initial_value(name: str, shape: tuple[int, ...], generator: torch.Generator, device):
    """peft's default: A uniform in +-1/sqrt(in) (kaiming_uniform with a=sqrt(5)), B zero — the
    adapted model starts as the base."""
    if name.endswith("lora_b.weight"):
        return torch.zeros(shape, device=device)
    bound = 1 / shape[1] ** 0.5
    return (torch.rand(shape, generator=generator, device=device) * 2 - 1) * bound
