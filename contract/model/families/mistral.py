"""Mistral 7B: v0.3 is Llama-shaped (32k vocabulary, RoPE base 1e6, no window); v0.1/v0.2's
`sliding_window` is reproduced in the attention mask (a query sees the `sliding_window` keys
up to and including itself, as transformers' mask does)."""

from __future__ import annotations

from typing import Any

from contract.model.arch import ModelArgs
from contract.model.families.base import LLAMA_LAYER_TENSORS, Family

PRESETS = {
    # mistralai/Mistral-7B-v0.3 config.json: 7.25B parameters.
    "mistral_7b": ModelArgs(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=32_768,
        ffn_hidden_dim=14_336,
        max_seq_len=32_768,
        norm_eps=1e-5,
        rope_theta=1_000_000.0,
        tie_embeddings=False,
        family="mistral",
    ),
}


def _window(config: dict[str, Any]) -> int | None:
    window = config.get("sliding_window")
    return int(window) if window else None


FAMILY = Family(
    name="mistral",
    model_type="mistral",
    architecture="MistralForCausalLM",
    layer_tensors=LLAMA_LAYER_TENSORS,
    presets=PRESETS,
    window=_window,
    export_keys=lambda args: {"sliding_window": args.sliding_window},
)
