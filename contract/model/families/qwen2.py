"""Qwen2 / Qwen2.5: Llama's layout with a bias on the q, k and v projections (not on o);
the small sizes tie the output head to the embedding. Qwen's optional sliding window
(`use_sliding_window`, off in every released dense checkpoint) is refused."""

from __future__ import annotations

from typing import Any

from contract.model.arch import ModelArgs
from contract.model.families.base import LLAMA_LAYER_TENSORS, Family, flag_set

LAYER_TENSORS = {
    **LLAMA_LAYER_TENSORS,
    "attention.wq.bias": "self_attn.q_proj.bias",
    "attention.wk.bias": "self_attn.k_proj.bias",
    "attention.wv.bias": "self_attn.v_proj.bias",
}


def _refuse(config: dict[str, Any]) -> str | None:
    return flag_set(config, "use_sliding_window")


PRESETS = {
    # Qwen/Qwen2.5-7B config.json: 7.62B parameters, 28 heads of 128 over 4 KV heads.
    "qwen2_5_7b": ModelArgs(
        dim=3584,
        n_layers=28,
        n_heads=28,
        n_kv_heads=4,
        vocab_size=152_064,
        ffn_hidden_dim=18_944,
        max_seq_len=131_072,
        norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_embeddings=False,
        family="qwen2",
        qkv_bias=True,
    ),
}

FAMILY = Family(
    name="qwen2",
    model_type="qwen2",
    architecture="Qwen2ForCausalLM",
    layer_tensors=LAYER_TENSORS,
    presets=PRESETS,
    qkv_bias=True,
    refuse=_refuse,
    export_keys=lambda args: {"use_sliding_window": False},
)
