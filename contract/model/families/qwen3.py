"""Qwen3 (dense): Llama's layout plus an RMSNorm over each query and each key head (before
RoPE), and a head width stated on its own (`head_dim`, not hidden_size / heads); the small
sizes tie the output head. The MoE sizes (`qwen3_moe`) are another model_type: runner=hf."""

from __future__ import annotations

from typing import Any

from contract.model.arch import ModelArgs
from contract.model.families.base import LLAMA_LAYER_TENSORS, Family, flag_set

LAYER_TENSORS = {
    **LLAMA_LAYER_TENSORS,
    "attention.q_norm.weight": "self_attn.q_norm.weight",
    "attention.k_norm.weight": "self_attn.k_norm.weight",
}


def _refuse(config: dict[str, Any]) -> str | None:
    return flag_set(config, "attention_bias", "use_sliding_window")


def _qwen3(**sizes: Any) -> ModelArgs:
    """The traits every Qwen3 dense size shares (Qwen/Qwen3-*/config.json)."""
    shared = dict(
        head_dim=128,
        vocab_size=151_936,
        max_seq_len=40_960,
        norm_eps=1e-6,
        rope_theta=1_000_000.0,
        family="qwen3",
        qk_norm=True,
    )
    return ModelArgs(**{**shared, **sizes})


PRESETS = {
    # Qwen/Qwen3-0.6B: 0.60B parameters; 16 heads of 128 (wider than hidden 1024 / 16).
    "qwen3_0_6b": _qwen3(
        dim=1024, n_layers=28, n_heads=16, n_kv_heads=8, ffn_hidden_dim=3072, tie_embeddings=True
    ),
    # Qwen/Qwen3-4B: 4.02B parameters.
    "qwen3_4b": _qwen3(
        dim=2560, n_layers=36, n_heads=32, n_kv_heads=8, ffn_hidden_dim=9728, tie_embeddings=True
    ),
    # Qwen/Qwen3-8B: 8.19B parameters.
    "qwen3_8b": _qwen3(
        dim=4096, n_layers=36, n_heads=32, n_kv_heads=8, ffn_hidden_dim=12_288, tie_embeddings=False
    ),
}

FAMILY = Family(
    name="qwen3",
    model_type="qwen3",
    architecture="Qwen3ForCausalLM",
    layer_tensors=LAYER_TENSORS,
    presets=PRESETS,
    qk_norm=True,
    refuse=_refuse,
    export_keys=lambda args: {"attention_bias": False, "use_sliding_window": False},
)
