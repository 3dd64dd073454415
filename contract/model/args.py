"""The `model` config section -> `ModelArgs`: the fields it states over a named preset.

Pure Python (no torch) so that the job launcher can plan a run without loading torch.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, replace
from typing import Any

from contract.model.arch import ModelArgs, RopeScaling
from contract.model.families import FAMILIES
from contract.model.families import PRESETS as MODEL_PRESETS

__all__ = ["ARCH_FIELDS", "MODEL_PRESETS", "ModelArgs", "RopeScaling", "model_args_from_config"]

ARCH_FIELDS = tuple(f.name for f in fields(ModelArgs))
"""The `model.<field>` keys that state the architecture."""
_REQUIRED = tuple(f.name for f in fields(ModelArgs) if f.default is MISSING)


def _field(section: Any, key: str) -> Any:
    return section.get(key) if isinstance(section, dict) else getattr(section, key, None)


def rope_scaling_from_config(section: Any) -> RopeScaling | None:
    """`model.rope_scaling` (a dict or a config dataclass) as `RopeScaling`; None stays None."""
    if section is None:
        return None
    return RopeScaling(**{f.name: _field(section, f.name) for f in fields(RopeScaling)})


def stated_args(model_cfg: Any) -> dict[str, Any]:
    """The architecture fields the `model` section sets (not null), as ModelArgs values."""
    stated = {k: _field(model_cfg, k) for k in ARCH_FIELDS if _field(model_cfg, k) is not None}
    if "rope_scaling" in stated:
        stated["rope_scaling"] = rope_scaling_from_config(stated["rope_scaling"])
    return stated


def model_args_from_config(model_cfg: Any) -> ModelArgs:
    """The `model` section's architecture: every field it states; the fields it leaves null
    from the preset `name`. A section stating every field needs no preset (its `name` is
    only a label): the shipped `conf/model/*.yaml` all do."""
    name = _field(model_cfg, "name")
    stated = stated_args(model_cfg)
    if name in MODEL_PRESETS:
        preset = MODEL_PRESETS[name]
        if "head_dim" not in stated and preset.head_dim == preset.dim // preset.n_heads:
            stated["head_dim"] = None  # derived: follows a restated dim or n_heads
        return replace(preset, **stated)
    missing = [f"model.{k}" for k in _REQUIRED if k not in stated]
    if missing:
        allowed = ", ".join(MODEL_PRESETS)
        raise ValueError(
            f"model.name: unknown model {name!r}; allowed: {allowed}, or any name with every "
            f"architecture key set (missing: {', '.join(missing)})"
        )
    return ModelArgs(**stated)


def family_problem(args: ModelArgs) -> str | None:
    """Why `args` is no model of its family (unknown family, or a trait it fixes), or None."""
    family = FAMILIES.get(args.family)
    if family is None:
        return f"model.family: {args.family!r} is not allowed; allowed: {', '.join(FAMILIES)}"
    for trait in ("qkv_bias", "qk_norm"):
        if getattr(args, trait) != getattr(family, trait):
            return (
                f"model.{trait}: {getattr(args, trait)} is not allowed for model.family="
                f"{family.name}; allowed: {getattr(family, trait)}"
            )
    return None
