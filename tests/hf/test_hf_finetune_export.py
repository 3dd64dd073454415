"""Fine-tune from a Hugging Face checkpoint, export, and load the export back: with
transformers (`AutoModelForCausalLM.from_pretrained`) and with model.init_from (round trip)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

from contract.model.hf_config import model_args_from_hf
from testing_support.hf_models import (
    assert_close,
    build_llama,
    fixed_batch,
    hf_logits,
    word_corpus,
)
from tests.hf.test_hf_load import trainer_logits
from tests.trainer.harness import committed_steps


def finetune_args(source: str, corpus: Path, *extra: str) -> list[str]:
    return [
        f"model.init_from={source}",
        "model.name=null",
        f"data.path={corpus}",
        "data.seq_len=32",
        "trainer.micro_batch_size=2",
        "trainer.max_steps=3",
        "trainer.warmup_steps=1",
        "trainer.lr=1e-2",
        "trainer.log_interval=1",
        "trainer.eval_interval=0",
        "trainer.peak_tflops=0.1",
        *extra,
    ]


@pytest.mark.slow
def test_finetune_export_loads_in_transformers_and_round_trips(tmp_path: Path, run_trainer):
    source = build_llama(tmp_path / "hf", tied=False)
    corpus = word_corpus(tmp_path / "words.jsonl")
    extra = ("trainer.export_hf=true", "trainer.export_dtype=fp32")
    result = run_trainer(2, finetune_args(str(source), corpus, *extra), small=False)
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.run_dir)
    assert f"[trainer] initialized from {source}" in result.stdout
    step = committed_steps(run_dir)[-1]
    assert step == 3

    export = run_dir / "export"
    names = sorted(p.name for p in export.iterdir())
    assert {"config.json", "generation_config.json", "model.safetensors.index.json",
            "tokenizer.json", "tokenizer_config.json"} <= set(names)  # fmt: skip
    assert not list(run_dir.glob(".export.partial-*"))
    # The weights get the mode their neighbours get (safetensors alone creates them 0600).
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in export.iterdir()}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # 0644 under the usual umask 022
    with safe_open(str(export / "model-00001-of-00001.safetensors"), "pt") as handle:
        assert handle.get_tensor("model.embed_tokens.weight").dtype == torch.float32

    batch = fixed_batch()
    trained = trainer_logits(tmp_path, 1, "checkpoint", str(source), str(run_dir), str(step))
    exported = hf_logits(export, batch)
    assert_close(exported, trained)
    # Fine-tuning moved the weights: the export is not the source.
    assert (hf_logits(source, batch) - exported).abs().max() > 1e-3
    # Round trip: init_from of the export gives the same logits again, at 2 ranks.
    assert_close(trainer_logits(tmp_path, 2, "init", str(export)), trained)


@pytest.mark.slow
def test_a_resumed_run_loads_its_own_checkpoint_not_init_from(tmp_path: Path, run_trainer):
    source = build_llama(tmp_path / "hf", tied=True)
    corpus = word_corpus(tmp_path / "words.jsonl", docs=40)
    first = run_trainer(0, finetune_args(str(source), corpus, "trainer.max_steps=2"), small=False)
    assert first.returncode == 0, first.stderr
    assert "initialized from" in first.stdout
    # The run's record states the architecture config.json gave (model.* were null).
    record = yaml.safe_load((Path(first.run_dir) / "config.yaml").read_text())["model"]
    hf = json.loads((source / "config.json").read_text())
    assert (record["dim"], record["n_layers"], record["ffn_hidden_dim"]) == (
        hf["hidden_size"], hf["num_hidden_layers"], hf["intermediate_size"])  # fmt: skip
    expected = asdict(model_args_from_hf(hf, str(source)))
    assert {k: record[k] for k in expected} == expected
    assert record["rope_scaling"] is not None  # build_llama's checkpoints scale RoPE
    again = finetune_args(str(source), corpus, "trainer.max_steps=3")
    second = run_trainer(0, again, run_dir=first.run_dir, small=False)
    assert second.returncode == 0, second.stderr
    assert "initialized from" not in second.stdout
    assert "at step 2" in second.stdout and "done: 3 steps" in second.stdout
