"""Llama 2/3.x and the checkpoints of its architecture (SmolLM2): the reference layout every
other family extends. Tested against transformers: Llama 3 with llama3 RoPE scaling, tied
(Llama 3.2 1B, SmolLM2) and untied (Llama 2, Llama 3 8B) heads, GQA and MHA."""

from __future__ import annotations

from typing import Any

from contract.model.arch import ModelArgs, RopeScaling
from contract.model.families.base import LLAMA_LAYER_TENSORS, Family, flag_set


def _refuse(config: dict[str, Any]) -> str | None:
    return flag_set(config, "attention_bias", "mlp_bias")


PRESETS = {
    # A few million parameters over the byte-level vocabulary: trains on CPU in minutes.
    "tiny": ModelArgs(
        dim=256,
        n_layers=6,
        n_heads=8,
        n_kv_heads=4,
        vocab_size=512,
        ffn_hidden_dim=704,
        max_seq_len=2048,
        rope_theta=10_000.0,
        tie_embeddings=True,
    ),
    # Llama 3.2 1B (its 128k context is 8k pre-training stretched by RoPE scaling).
    "llama3_1b": ModelArgs(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128_256,
        ffn_hidden_dim=8192,
        max_seq_len=131_072,
        tie_embeddings=True,
        rope_scaling=RopeScaling(
            factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_seq_len=8192
        ),
    ),
    # Llama 3 8B.
    "llama3_8b": ModelArgs(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128_256,
        ffn_hidden_dim=14_336,
        max_seq_len=8192,
    ),
    # Llama 3 70B.
    "llama3_70b": ModelArgs(
        dim=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        vocab_size=128_256,
        ffn_hidden_dim=28_672,
        max_seq_len=8192,
    ),
    # HuggingFaceTB/SmolLM2-135M: Llama architecture, 9 heads of 64, tied head.
    "smollm2_135m": ModelArgs(
        dim=576,
        n_layers=30,
        n_heads=9,
        n_kv_heads=3,
        vocab_size=49_152,
        ffn_hidden_dim=1536,
        max_seq_len=8192,
        rope_theta=100_000.0,
        tie_embeddings=True,
    ),
    # HuggingFaceTB/SmolLM2-1.7B: Llama architecture, multi-head (32 KV heads), tied head.
    "smollm2_1_7b": ModelArgs(
        dim=2048,
        n_layers=24,
        n_heads=32,
        n_kv_heads=32,
        vocab_size=49_152,
        ffn_hidden_dim=8192,
        max_seq_len=8192,
        rope_theta=130_000.0,
        tie_embeddings=True,
    ),
}

FAMILY = Family(
    name="llama",
    model_type="llama",
    architecture="LlamaForCausalLM",
    layer_tensors=LLAMA_LAYER_TENSORS,
    presets=PRESETS,
    refuse=_refuse,
    export_keys=lambda args: {"attention_bias": False, "mlp_bias": False},
)
