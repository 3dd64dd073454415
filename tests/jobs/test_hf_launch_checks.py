"""runner=hf at launch: a checkpoint without tokenizer files (or a tokenizer bigger than its
vocabulary) is refused before any rank starts, and the plan says how it evaluates; an
evaluation pass is trainer.eval_batches micro batches per rank, not the whole held-out split."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from jobs.errors import JobConfigError
from testing_support.hf_models import build_llama
from tests.jobs.conftest import SAMPLE_DATA, build


def hf_line(model_dir) -> list[str]:
    return ["runner=hf", "model=hf", f"model.init_from={model_dir}", f"data.path={SAMPLE_DATA}"]


def test_a_checkpoint_without_a_tokenizer_is_refused_at_launch(tmp_path):
    model = build_llama(tmp_path / "model", tied=False)
    job = build(hf_line(model), run_id="hf-ok")
    assert "eval every 50 steps on 4 x 8 windows per rank" in job.plan.runner
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors.index.json"):
        shutil.copy(model / name, bare / name)
    with pytest.raises(JobConfigError, match=r"^data\.tokenizer: .*init_from's own files"):
        build(hf_line(bare), run_id="hf-bare")
    off = build([*hf_line(model), "trainer.eval_interval=0"], run_id="hf-off")
    assert "no eval (trainer.eval_interval=0)" in off.plan.runner


def test_an_evaluation_pass_is_eval_batches_per_rank():
    from trainer.runners.hf.data import WindowDataset
    from trainer.runners.hf.train import eval_windows

    trainer = SimpleNamespace(eval_batches=4, micro_batch_size=2)
    assert eval_windows(SimpleNamespace(trainer=trainer), world=2) == 16
    source = SimpleNamespace(count=10_000)
    assert len(WindowDataset(source, 16)) == 16 and len(WindowDataset(source)) == 10_000


def test_the_plan_says_how_many_parameters_lora_trains(tmp_path):
    """Counted from the architecture; checked against the adapters the trainer builds."""
    import torch

    from trainer.model.lora import add_lora
    from trainer.model.model import Transformer

    model = build_llama(tmp_path / "model", tied=False)
    lora = ["model.lora.rank=4", "model.lora.alpha=8", "model.lora.targets=[q_proj,v_proj]"]
    line = ["model=hf", f"model.init_from={model}", f"data.path={SAMPLE_DATA}", *lora]
    job = build(line, run_id="lora")
    with torch.device("meta"):
        built = Transformer(_args(job))
    add_lora(built, 4, 8.0, 0.0, ["q_proj", "v_proj"])
    trained = sum(p.numel() for p in built.parameters() if p.requires_grad)
    assert f"LoRA r=4 trains {trained:,} of them" in str(job.plan)
    assert ": q_proj, v_proj)" in str(job.plan)


def _args(job):
    from contract.model.hf_config import resolve_init_from_args
    from trainer.hf.config import read_hf_config

    return resolve_init_from_args(job.cfg.model, read_hf_config(job.cfg.model.init_from))


def test_the_plan_says_how_many_parameters_peft_trains(tmp_path):
    """runner=hf: counted from the config.json read at launch; checked against what peft
    itself reports for the same checkpoint and runner.peft. Where the count cannot be made
    (init_from read only in the pods, a target the launcher does not size) the plan says so."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from jobs.plan import hf_lora_trained

    model = build_llama(tmp_path / "model", tied=False)
    targets = ["q_proj", "v_proj", "gate_proj", "down_proj"]
    peft = [
        "runner.peft.r=4",
        "runner.peft.alpha=8",
        f"runner.peft.target_modules=[{','.join(targets)}]",
    ]
    job = build([*hf_line(model), *peft], run_id="hf-lora")
    adapted = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model),
        LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM"),
    )
    trained, every = adapted.get_nb_trainable_parameters()
    assert f"; LoRA r=4 trains {trained:,} of {every - trained:,} parameters" in str(job.plan)
    assert ": q_proj, v_proj, gate_proj, down_proj)" in str(job.plan)
    full = build(hf_line(model), run_id="hf-full")
    assert "LoRA" not in str(full.plan)
    assert "(model.init_from is read in the pods)" in hf_lora_trained(job.cfg, None)
    head = build(
        [*hf_line(model), "runner.peft.r=4", "runner.peft.target_modules=[q_proj,lm_head]"]
    )
    assert "count not known at launch (lm_head: counted are only q_proj" in str(head.plan)
