"""Issue 45 item 1: every export loads. A run on the built-in byte tokenizer exports a
`tokenizer.json` giving the trainer's own ids, and each family's export (and a LoRA adapter,
through peft) loads in transformers with `AutoTokenizer` and generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from testing_support.hf_models import build_llama
from tests.trainer.harness import committed_steps
from trainer.hf.export import export_run
from trainer.tokenizer.byte import ByteTokenizer

FAMILIES = {
    "llama": [],
    "qwen2": ["model.family=qwen2", "model.qkv_bias=true"],
    "qwen3": ["model.family=qwen3", "model.qk_norm=true", "model.tie_embeddings=false"],
    "mistral": ["model.family=mistral", "model.sliding_window=16"],
}
TEXT = "Once upon a time, née Zoë 😀\n"


def byte_run(run_trainer, *overrides: str, small: bool = True) -> Path:
    result = run_trainer(0, ["trainer.max_steps=2", *overrides], small=small)
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.run_dir)
    assert committed_steps(run_dir)[-1] == 2
    return run_dir


def generate(model, tokenizer, prompt: str) -> list[int]:
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert out.shape == (1, ids.shape[1] + 6)
    return out[0, ids.shape[1] :].tolist()


def check_tokenizer(directory: Path) -> AutoTokenizer:
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert tokenizer(TEXT).input_ids == ByteTokenizer().encode(TEXT).tolist()
    assert tokenizer.decode(ByteTokenizer().encode(TEXT).tolist()) == TEXT
    assert (tokenizer.eos_token, tokenizer.eos_token_id, len(tokenizer)) == (
        "<|endoftext|>", 256, 257)  # fmt: skip
    return tokenizer


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_byte_tokenizer_export_loads_and_generates(tmp_path: Path, run_trainer, family: str):
    run_dir = byte_run(run_trainer, *FAMILIES[family])
    export_run(str(run_dir), str(tmp_path / "export"), dtype="fp32")
    export = tmp_path / "export"
    config = json.loads((export / "config.json").read_text())
    assert (config["model_type"], config["eos_token_id"]) == (family, 256)
    assert json.loads((export / "generation_config.json").read_text())["eos_token_id"] == 256
    tokenizer = check_tokenizer(export)
    model = AutoModelForCausalLM.from_pretrained(export)
    assert type(model).__name__.lower().startswith(family)
    new = generate(model, tokenizer, TEXT)
    # Greedy: each token is the argmax of the exported model's own next-token logits.
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        first = model(ids).logits[0, -1].argmax().item()
    assert new[0] == first


@pytest.mark.slow
def test_a_byte_tokenizer_lora_adapter_loads_with_peft(tmp_path: Path, run_trainer):
    source = build_llama(tmp_path / "hf", tied=False, scaling={})
    run_dir = byte_run(
        run_trainer,
        f"model.init_from={source}",
        "model.name=null",
        "data.tokenizer=byte",
        "model.lora.rank=4",
        "data.seq_len=32",
        "trainer.micro_batch_size=2",
        "trainer.log_interval=1",
        "trainer.eval_interval=0",
        "trainer.peak_tflops=0.1",
        small=False,
    )
    export_run(str(run_dir), str(tmp_path / "adapter"), dtype="fp32")
    adapter = tmp_path / "adapter"
    assert (adapter / "adapter_config.json").is_file()
    tokenizer = check_tokenizer(adapter)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(source), adapter)
    assert len(generate(model, tokenizer, TEXT)) == 6
