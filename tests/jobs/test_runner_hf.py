"""runner=hf: transformers.Trainer fine-tunes small random Llama and Qwen3 checkpoints built
here on 2 CPU ranks through the local backend, resumes from its newest complete checkpoint
after a rank is SIGKILLed, and leaves an export that `from_pretrained` loads (LoRA merged)."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch

from jobs.backends import run_state
from jobs.backends.base import SUCCEEDED
from jobs.backends.local.backend import LocalBackend
from testing_support.hf_models import build_family, build_llama, word_corpus
from tests.jobs.test_local_recovery import wait_until
from tests.procs import ranks_of
from trainer.faults import STEP_DELAY_ENV
from trainer.runners.hf.settings import training_arguments

MAX_STEPS = 8


def hf_job(workdir: Path, source: Path, run_id: str, *extra: str):
    from jobs.compose import compose
    from jobs.materialize import materialize

    overrides = [
        "runner=hf",
        "model=hf",
        f"model.init_from={source}",
        f"data.path={word_corpus(workdir / 'corpus.jsonl')}",
        "data.seq_len=32",
        "trainer.micro_batch_size=2",
        f"trainer.max_steps={MAX_STEPS}",
        "trainer.warmup_steps=1",
        "trainer.lr=1e-2",
        "trainer.log_interval=1",
        "trainer.eval_interval=4",
        "trainer.checkpoint.interval=2",
        f"storage.root={workdir / 'runs'}",
        f"run_id={run_id}",
        *extra,
    ]
    return materialize(compose(overrides), now=datetime.now(UTC), git_sha=None)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "extra"),
    [("llama", ()), ("qwen3", ("runner.peft.r=4", "runner.peft.alpha=8"))],
)
def test_hf_runner_finetunes_resumes_after_sigkill_and_exports(workdir, monkeypatch, family, extra):
    from transformers import AutoModelForCausalLM

    if family == "llama":
        source = build_llama(workdir / family, tied=False)
    else:
        source = build_family(workdir / family, family, tied=False)
    backend = LocalBackend(str(workdir / "runs"))
    monkeypatch.setenv(STEP_DELAY_ENV, "0.5")  # slow steps: the kill lands mid-run
    job = hf_job(workdir, source, family, *extra)
    assert "runner   hf (transformers.Trainer" in str(job.plan)
    backend.schedule(backend.dryrun(job))
    run_dir = workdir / "runs" / family
    wait_until(
        lambda: (run_dir / "checkpoints" / "checkpoint-2" / "trainstack-complete").exists(),
        "a checkpoint",
    )
    wait_until(lambda: (backend.status(family).last_step or 0) >= 3, "step 3")
    victim = ranks_of(family, "trainer.runners.hf")[1]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: backend.status(family).finished, "the run to finish")
    status = backend.status(family)
    output = (run_dir / run_state.OUTPUT_LOG).read_text()
    assert (status.state, status.exit_code) == (SUCCEEDED, 0), output[-4000:]
    assert "[runner=hf] resumed from checkpoint-" in output
    lines = [json.loads(line) for line in (run_dir / "logs" / "metrics.jsonl").open()]
    steps = {r["step"] for r in lines if "loss" in r}
    assert steps == set(range(1, MAX_STEPS + 1))
    assert any("eval_loss" in r for r in lines)
    assert status.last_step == MAX_STEPS

    export = run_dir / "export"
    assert not (export / "adapter_config.json").exists()  # LoRA merged into the weights
    tuned = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    assert type(tuned).__name__ == type(base).__name__
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(tuned.state_dict()[name], base.state_dict()[name])  # it trained
    tokens = torch.randint(3, 40, (1, 16))
    assert torch.isfinite(tuned(tokens).logits).all()
    assert (export / "tokenizer.json").is_file()


def test_training_arguments_follow_the_built_in_keys(tmp_path):
    from omegaconf import OmegaConf

    from contract.config import RunConfig

    cfg = OmegaConf.to_object(
        OmegaConf.merge(
            OmegaConf.structured(RunConfig),
            {
                "trainer": {
                    "lr": 3e-4,
                    "max_steps": 20,
                    "micro_batch_size": 2,
                    "global_batch_size": 32,
                    "checkpoint": {"interval": 5, "keep": 2},
                    "mixed_precision": "auto",
                }
            },
        )
    )
    gpu = training_arguments(cfg, output_dir=str(tmp_path), world=8, cuda=True)
    assert (gpu["learning_rate"], gpu["max_steps"], gpu["gradient_accumulation_steps"]) == (
        3e-4,
        20,
        2,
    )
    assert (gpu["save_steps"], gpu["save_total_limit"], gpu["bf16"]) == (5, 2, True)
    assert gpu["fsdp"] == "full_shard auto_wrap" and gpu["fsdp_config"]["version"] == 2
    cpu = training_arguments(cfg, output_dir=str(tmp_path), world=2, cuda=False)
    assert (cpu["bf16"], cpu["use_cpu"], cpu["ddp_backend"]) == (False, True, "gloo")
    assert "fsdp" not in cpu and cpu["gradient_accumulation_steps"] == 8


@pytest.mark.slow
def test_hf_runner_with_an_s3_run_dir_keeps_checkpoints_there_and_resumes_from_them(
    workdir, s3_direct, s3_bucket
):
    import shutil

    from trainer.runners.hf.train import staging

    source = build_family(workdir / "qwen3", "qwen3", tied=False)
    backend = LocalBackend(f"s3://{s3_bucket}/runs")
    root = f"storage.root=s3://{s3_bucket}/runs"
    first = hf_job(workdir, source, "remote", root, "trainer.max_steps=4")
    backend.schedule(backend.dryrun(first))
    wait_until(lambda: backend.status("remote").finished, "the first run")
    output = (workdir / "runs" / "remote" / run_state.OUTPUT_LOG).read_text()
    assert backend.status("remote").state == SUCCEEDED, output[-4000:]
    keys = {o["Key"] for o in s3_direct.client().list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert "runs/remote/checkpoints/checkpoint-4/trainstack-complete" in keys
    assert "runs/remote/export/model.safetensors" in keys
    assert "runs/remote/logs/metrics.jsonl" in keys  # copied by runner_exec
    assert "runs/remote/config.yaml" in keys  # the run record

    shutil.rmtree(staging(first.spec.run_dir))  # a new pod: nothing on local disk
    second = hf_job(workdir, source, "remote", root, "trainer.max_steps=6")
    backend.schedule(backend.dryrun(second))
    wait_until(lambda: backend.status("remote").finished, "the relaunch")
    output = (workdir / "runs" / "remote" / run_state.OUTPUT_LOG).read_text()
    assert backend.status("remote").state == SUCCEEDED, output[-4000:]
    assert "[runner=hf] resumed from checkpoint-4" in output
