"""Issue 26 LoRA: only the adapters train; a LoRA run's checkpoint holds the adapters and their
optimizer state alone and resumes bit for bit; its export is a PEFT adapter that peft loads
with the trainer's logits, and --merge writes the base with them folded in."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from contract.model.arch import ModelArgs
from jobs.cli import main
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
from tests.trainer.harness import committed_steps, losses_by_step
from trainer.hf.export import export_run
from trainer.model.lora import add_lora, is_adapter
from trainer.model.model import Transformer

ALL_PROJECTIONS = "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"


def test_only_adapters_get_gradients_and_start_as_the_base():
    args = ModelArgs(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64,
                     ffn_hidden_dim=48, max_seq_len=16, qkv_bias=True, family="qwen2")  # fmt: skip
    with torch.device("meta"):
        model, base = Transformer(args), Transformer(args)
    add_lora(model, 4, 8.0, 0.0, ["q_proj", "v_proj", "down_proj"])
    for m in (model, base):
        m.to_empty(device="cpu")
        m.init_weights(3)
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(model(tokens), base(tokens))  # B starts at zero
    model(tokens).sum().backward()
    grads = {n for n, p in model.named_parameters() if p.grad is not None}
    adapters = {n for n, _ in model.named_parameters() if is_adapter(n)}
    assert grads == adapters and len(adapters) == 2 * 3 * 2  # A and B x 3 targets x 2 layers
    assert {n.rsplit(".", 3)[-3] for n in adapters} == {"wq", "wv", "w2"}


def peft_logits(base: Path, adapter: Path, tokens: torch.Tensor) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    with torch.no_grad():
        return model(tokens).logits


def checkpoint_keys(run_dir: Path, step: int) -> list[str]:
    metadata = run_dir / f"checkpoints/step-{step:08d}/.metadata"
    return list(pickle.loads(metadata.read_bytes()).state_dict_metadata)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_lora_run_exports_a_peft_adapter_and_merged_weights(tmp_path, run_trainer, family):
    source = (
        build_family(tmp_path / "hf", "qwen3", tied=True)
        if family == "qwen3"
        else build_llama(tmp_path / "hf", tied=False)
    )
    corpus = word_corpus(tmp_path / "words.jsonl", docs=60)
    targets = ALL_PROJECTIONS if family == "qwen3" else "[q_proj,k_proj,v_proj,o_proj]"
    lora = ("model.lora.rank=4", "model.lora.alpha=8", f"model.lora.targets={targets}")
    result = run_trainer(2, finetune_args(str(source), corpus, *lora), small=False)
    assert result.returncode == 0, result.stderr
    run_dir, step = Path(result.run_dir), 3
    assert committed_steps(run_dir)[-1] == step
    keys = [k for k in checkpoint_keys(run_dir, step) if k.startswith(("model.", "optim.state"))]
    assert keys and [k for k in keys if ".lora_" not in k] == []

    batch = fixed_batch()
    trained = trainer_logits(tmp_path, 2, "lora", str(source), str(run_dir), str(step))
    export_run(str(run_dir), str(tmp_path / "adapter"), dtype="fp32")
    names = sorted(p.name for p in (tmp_path / "adapter").iterdir())
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= set(names)
    full_mode = 0o666 & ~current_umask()  # as a full export's files (and any new file) get
    assert ((tmp_path / "adapter/adapter_model.safetensors").stat().st_mode & 0o777) == full_mode
    adapted = peft_logits(source, tmp_path / "adapter", batch)
    assert_close(adapted, trained)
    assert (hf_logits(source, batch) - adapted).abs().max() > 1e-3  # the adapters trained

    code = main(["export", str(run_dir), "--to", str(tmp_path / "merged"), "--dtype", "fp32",
                 "--merge"])  # fmt: skip
    assert code == 0
    assert_close(hf_logits(tmp_path / "merged", batch), adapted)
    merged = sorted((tmp_path / "merged").glob("*.safetensors"))
    assert merged and {p.stat().st_mode & 0o777 for p in merged} == {full_mode}


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.slow
def test_lora_resume_is_bit_exact(tmp_path, run_trainer):
    source = build_llama(tmp_path / "hf", tied=True)
    corpus = word_corpus(tmp_path / "words.jsonl", docs=60)
    args = finetune_args(str(source), corpus, "model.lora.rank=4", "model.lora.dropout=0.1",
                         "trainer.checkpoint.interval=2", "trainer.checkpoint.keep=3",
                         "trainer.max_steps=4")  # fmt: skip
    straight = run_trainer(2, args, run_dir=str(tmp_path / "straight"), small=False)
    assert straight.returncode == 0, straight.stderr
    # A run that stopped after step 2: the same run dir holding only that checkpoint.
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(Path(straight.run_dir) / "checkpoints/step-00000002",
                    resumed_dir / "checkpoints/step-00000002")  # fmt: skip
    resumed = run_trainer(2, args, run_dir=str(resumed_dir), small=False)
    assert resumed.returncode == 0, resumed.stderr
    assert "at step 2" in resumed.stdout
    expected = losses_by_step(straight.run_dir)
    assert losses_by_step(resumed.run_dir) == {s: expected[s] for s in (3, 4)}
    a = trainer_logits(tmp_path, 1, "lora", str(source), straight.run_dir, "4")
    b = trainer_logits(tmp_path, 1, "lora", str(source), resumed.run_dir, "4")
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.lora.rank=4"], r"^model\.lora\.rank: LoRA adapts a pretrained model"),
        (["model.lora.rank=-1"], r"^model\.lora\.rank: -1 is out of range"),
        (["INIT", "model.lora.rank=4", "model.lora.targets=[qkv]"],
         r"^model\.lora\.targets: \['qkv'\] is not allowed; allowed: a non-empty list of q_proj"),
        (["INIT", "model.lora.rank=4", "model.lora.alpha=0"], r"^model\.lora\.alpha: 0"),
        (["INIT", "model.lora.rank=4", "model.lora.dropout=1"], r"^model\.lora\.dropout: 1"),
    ],
)  # fmt: skip
def test_bad_lora_settings_are_one_line_at_launch(tmp_path, overrides, message):
    from jobs.validate import JobConfigError
    from tests.jobs.conftest import build

    source = build_llama(tmp_path / "hf", tied=True)
    init = ["model=hf", f"model.init_from={source}", "data.tokenizer=byte"]
    args = [a for o in overrides for a in (init if o == "INIT" else [o])]
    with pytest.raises(JobConfigError, match=message) as raised:
        build(args)
    assert "\n" not in str(raised.value)
