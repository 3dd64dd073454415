"""One module per model family the built-in trainer reproduces exactly (torchtitan keeps a
folder per family): its Hugging Face identity and tensor names, its traits and named sizes.
The decoder code they share is `trainer.model.model`. Anything else is `runner=hf`'s."""

from __future__ import annotations

from contract.model.families import llama, mistral, qwen2, qwen3
from contract.model.families.base import TOP_TENSORS, Family

FAMILIES: dict[str, Family] = {m.FAMILY.name: m.FAMILY for m in (llama, qwen2, qwen3, mistral)}
BY_MODEL_TYPE: dict[str, Family] = {f.model_type: f for f in FAMILIES.values()}
PRESETS = {name: args for f in FAMILIES.values() for name, args in f.presets.items()}
LAYER_TENSORS: dict[str, str] = {
    k: v for f in FAMILIES.values() for k, v in f.layer_tensors.items()
}
"""Every family's per-block names (they agree where they overlap): trainer suffix -> HF."""
PROJECTIONS: dict[str, str] = {
    hf.rsplit(".", 2)[-2]: ours.removesuffix(".weight")
    for ours, hf in LAYER_TENSORS.items()
    if hf.endswith("_proj.weight")
}
"""Hugging Face projection name (q_proj) -> the trainer's module in a block (attention.wq):
what `model.lora.targets` names."""

__all__ = [
    "BY_MODEL_TYPE",
    "FAMILIES",
    "LAYER_TENSORS",
    "PRESETS",
    "PROJECTIONS",
    "TOP_TENSORS",
    "Family",
]
