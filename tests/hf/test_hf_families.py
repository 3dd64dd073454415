"""Issue 26: every family the built-in trainer supports (qwen2, qwen3, mistral; llama in
test_hf_load) gives transformers' logits at 1 and 2 ranks, tied and untied, with GQA; an
export loads in transformers with the trainer's logits; what it cannot reproduce is refused
naming runner=hf."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.model.hf_config import model_args_from_hf
from testing_support.hf_models import (
    assert_close,
    build_family,
    build_llama,
    fixed_batch,
    hf_logits,
    word_corpus,
)
from tests.hf.test_hf_finetune_export import finetune_args
from tests.hf.test_hf_load import trainer_logits
from tests.trainer.harness import committed_steps
from trainer.errors import ConfigError

CASES = {
    "qwen2-tied": ("qwen2", True, {}),
    "qwen2-untied": ("qwen2", False, {}),
    "qwen3-tied": ("qwen3", True, {}),
    "qwen3-untied": ("qwen3", False, {}),
    "mistral-untied": ("mistral", False, {}),
    # v0.1's window, shorter than fixed_batch's 48 tokens: the mask must cut it.
    "mistral-window-tied": ("mistral", True, {"sliding_window": 20}),
    # Llama-architecture checkpoints with plain RoPE: Llama 2 (multi-head, untied) and
    # SmolLM2 (9 heads over 3 KV heads, tied).
    "llama2-mha-untied": ("llama", False, {"num_attention_heads": 4, "num_key_value_heads": 4}),
    "smollm2-tied": (
        "llama",
        True,
        {"hidden_size": 72, "num_attention_heads": 9, "num_key_value_heads": 3},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_logits_equal_transformers_at_one_and_two_ranks(tmp_path: Path, case: str):
    family, tied, extra = CASES[case]
    if family == "llama":
        source = build_llama(tmp_path / "hf", tied=tied, scaling={}, **extra)
    else:
        source = build_family(tmp_path / "hf", family, tied=tied, **extra)
    assert len(list(source.glob("model-*.safetensors"))) > 1
    expected = hf_logits(source, fixed_batch())
    if extra.get("sliding_window"):  # the window changes transformers' logits: it is tested
        unwindowed = build_family(tmp_path / "full", family, tied=tied)
        assert (hf_logits(unwindowed, fixed_batch()) - expected).abs().max() > 1e-3
    for nproc in (1, 2):
        assert_close(trainer_logits(tmp_path, nproc, "init", str(source)), expected)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "qwen3", "mistral"])
def test_finetune_export_loads_in_transformers_and_resumes(
    tmp_path: Path, run_trainer, family: str
):
    extra = {"sliding_window": 20} if family == "mistral" else {}
    source = build_family(tmp_path / "hf", family, tied=family == "qwen3", **extra)
    corpus = word_corpus(tmp_path / "words.jsonl", docs=60)
    export_args = ("trainer.export_hf=true", "trainer.export_dtype=fp32")
    first = run_trainer(2, finetune_args(str(source), corpus, "trainer.max_steps=2"), small=False)
    assert first.returncode == 0, first.stderr
    assert "initialized from" in first.stdout
    again = finetune_args(str(source), corpus, *export_args)
    second = run_trainer(2, again, run_dir=first.run_dir, small=False)
    assert second.returncode == 0, second.stderr
    assert "initialized from" not in second.stdout and "at step 2" in second.stdout
    run_dir = Path(first.run_dir)
    step = committed_steps(run_dir)[-1]
    assert step == 3

    export = run_dir / "export"
    config = (export / "config.json").read_text()
    assert f'"model_type": "{family}"' in config
    trained = trainer_logits(tmp_path, 1, "checkpoint", str(source), str(run_dir), str(step))
    assert_close(hf_logits(export, fixed_batch()), trained)
    assert (hf_logits(source, fixed_batch()) - trained).abs().max() > 1e-3


REFUSED = {
    "another model_type": ({"model_type": "gemma2"}, "model_type 'gemma2'"),
    "qwen3 MoE": ({"model_type": "qwen3_moe"}, "model_type 'qwen3_moe'"),
    "experts in a known type": (
        {"model_type": "mistral", "num_local_experts": 8},
        "num_local_experts=8 (mixture of experts)",
    ),
    "qwen2 sliding window": ({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding"),
    "qwen3 attention bias": ({"model_type": "qwen3", "attention_bias": True}, "attention_bias"),
    "yarn RoPE": (
        {"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
        "rope_scaling type 'yarn'",
    ),
}
BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 300,
    "intermediate_size": 97,
    "max_position_embeddings": 256,
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_no_family_reproduces_is_one_line_naming_runner_hf(case: str):
    changes, expected = REFUSED[case]
    with pytest.raises(ConfigError) as raised:
        model_args_from_hf({**BASE, **changes}, "/ckpt")
    message = str(raised.value)
    assert expected in message and "runner=hf" in message and "\n" not in message


def test_family_traits_come_from_config_json():
    qwen3 = model_args_from_hf({**BASE, "model_type": "qwen3", "head_dim": 24}, "/q3")
    traits = (qwen3.family, qwen3.head_dim, qwen3.qk_norm, qwen3.qkv_bias)
    assert traits == ("qwen3", 24, True, False)
    qwen2 = model_args_from_hf({**BASE, "model_type": "qwen2", "sliding_window": 4096}, "/q2")
    assert (qwen2.qkv_bias, qwen2.sliding_window, qwen2.head_dim) == (True, None, 16)
    mistral = model_args_from_hf({**BASE, "model_type": "mistral", "sliding_window": 4096}, "/m")
    assert mistral.sliding_window == 4096
