"""Issue 26 presets: each shipped family preset is the model transformers builds from the same
config.json (parameter count on the meta device), states the whole architecture, and plans
with the right FLOPs per token (QK-norm, biases and tied heads counted)."""

from __future__ import annotations

import pytest
import torch

from contract.model.args import MODEL_PRESETS, model_args_from_config
from contract.model.hf_config import model_args_from_hf
from jobs.compose import compose
from trainer.hf.config import hf_config_from_args

FAMILY_PRESETS = [
    "qwen3_0_6b", "qwen3_4b", "qwen3_8b", "qwen2_5_7b", "mistral_7b", "smollm2_135m",
    "smollm2_1_7b", "llama3_1b", "llama3_8b",
]  # fmt: skip
# What the model cards publish (rounded), a check on the numbers typed into the presets.
PUBLISHED_BILLIONS = {
    "qwen3_0_6b": 0.6, "qwen3_4b": 4.0, "qwen3_8b": 8.2, "qwen2_5_7b": 7.6,
    "mistral_7b": 7.25, "smollm2_135m": 0.135, "smollm2_1_7b": 1.7,
}  # fmt: skip


def transformers_model(option: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = hf_config_from_args(MODEL_PRESETS[option], None, "bf16")
    hf = AutoConfig.for_model(config.pop("model_type"), **config)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf), config


@pytest.mark.parametrize("option", FAMILY_PRESETS)
def test_preset_equals_the_transformers_model_of_its_config(option: str):
    args = MODEL_PRESETS[option]
    model, config = transformers_model(option)
    assert args.num_params() == sum(p.numel() for p in model.parameters())
    assert model_args_from_hf({**config, "model_type": args.family}, option) == args
    # FLOPs/token: 6 x every matmul parameter (the output head even when tied) + attention.
    matmul = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)
    matmul += model.lm_head.weight.numel() if args.tie_embeddings else 0
    attention = 12 * args.n_layers * args.n_heads * args.head_dim * 4096
    assert args.training_flops_per_token(4096) == 6 * matmul + attention


@pytest.mark.parametrize("option", sorted(PUBLISHED_BILLIONS))
def test_option_states_the_preset_and_matches_the_model_card(option: str):
    args = model_args_from_config(compose([f"model={option}"]).model)
    assert args == MODEL_PRESETS[option]
    assert args.num_params() / 1e9 == pytest.approx(PUBLISHED_BILLIONS[option], rel=0.02)


def test_traits_are_counted():
    qwen3, qwen2 = MODEL_PRESETS["qwen3_0_6b"], MODEL_PRESETS["qwen2_5_7b"]
    assert qwen3.head_dim * qwen3.n_heads != qwen3.dim  # 16 heads of 128 over hidden 1024
    plain = qwen3.__class__(**{**qwen3.__dict__, "qk_norm": False, "family": "llama"})
    assert qwen3.num_params() - plain.num_params() == 2 * 128 * qwen3.n_layers
    unbiased = qwen2.__class__(**{**qwen2.__dict__, "qkv_bias": False, "family": "llama"})
    assert qwen2.num_params() - unbiased.num_params() == (3584 + 2 * 512) * 28
