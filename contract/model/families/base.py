"""What a family module declares: its Hugging Face identity, its fixed architecture traits,
its tensor names and its named sizes. Pure Python: `jobs` plans runs with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contract.model.arch import ModelArgs

LLAMA_LAYER_TENSORS = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
"""Per-block trainer parameter suffix -> Hugging Face suffix (under model.layers.N.)."""
TOP_TENSORS = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def _nothing(config: dict[str, Any]) -> str | None:
    return None


def _no_window(config: dict[str, Any]) -> int | None:
    return None


@dataclass(frozen=True)
class Family:
    name: str
    model_type: str
    """config.json `model_type`."""
    architecture: str
    """config.json `architectures[0]`."""
    layer_tensors: dict[str, str]
    """Per-block trainer parameter suffix -> Hugging Face suffix: every tensor of a block."""
    presets: dict[str, ModelArgs]
    qkv_bias: bool = False
    qk_norm: bool = False
    refuse: Callable[[dict[str, Any]], str | None] = _nothing
    """What of a config.json of this model_type the trainer cannot reproduce, or None."""
    window: Callable[[dict[str, Any]], int | None] = _no_window
    """The sliding window a config.json asks for (None: full attention)."""
    export_keys: Callable[[ModelArgs], dict[str, Any]] = field(default=lambda args: {})
    """config.json keys this family writes on export beyond the shared ones."""


def flag_set(config: dict[str, Any], *keys: str) -> str | None:
    """The first of `keys` set truthy in `config`, as `key=value`, or None."""
    for key in keys:
        if config.get(key):
            return f"{key}={json.dumps(config[key])}"
    return None
