"""`trainer.resume_from`: a new run starts from another run's committed checkpoint. In full it
continues the source's losses bit for bit; weights only it starts at step 0 with a fresh
optimizer on the source's weights; its own checkpoints win on a restart; a value that is not a
committed checkpoint that fits the model is one line, exit 2, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from contract.config import EXIT_BAD_INPUT
from tests.trainer.harness import (
    TrainerResult,
    committed_steps,
    launch_trainer,
    losses_by_step,
    read_metrics,
)
from trainer.__main__ import main

pytestmark = pytest.mark.slow

EVERY_4 = ["trainer.checkpoint.interval=4", "trainer.eval_interval=4"]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> TrainerResult:
    """The source run: 2 ranks, 12 steps, checkpoints at 4, 8, 12, eval at the same steps."""
    work = tmp_path_factory.mktemp("source")
    result = launch_trainer(work, 2, [*EVERY_4, "trainer.max_steps=12"]).finish()
    assert result.returncode == 0, result.stderr
    assert committed_steps(Path(result.run_dir)) == [4, 8, 12]
    return result


def evals(run_dir: str) -> dict[int, float]:
    return {r["step"]: r["eval_loss"] for r in read_metrics(run_dir) if "eval_loss" in r}


def test_full_resume_from_continues_the_source_exactly(start_trainer, tmp_path, source):
    step_8 = f"{source.run_dir}/checkpoints/step-00000008"
    run = start_trainer(2, [*EVERY_4, "trainer.max_steps=12", f"trainer.resume_from={step_8}"])
    result = run.finish()
    assert result.returncode == 0, result.stderr
    assert f"started from {step_8} (trainer.resume_from; at step 8)" in result.stdout
    expected = {s: v for s, v in losses_by_step(source.run_dir).items() if s > 8}
    assert losses_by_step(result.run_dir) == expected  # steps 9-12, bit for bit
    assert evals(result.run_dir) == {12: evals(source.run_dir)[12]}
    assert committed_steps(Path(result.run_dir)) == [12]
    assert committed_steps(Path(source.run_dir)) == [4, 8, 12]  # the source is only read


def optimizer_steps(checkpoint: Path, tmp_path: Path) -> set[float]:
    """The AdamW `step` counts saved in a DCP checkpoint (read whole on CPU)."""
    whole = tmp_path / "whole.pt"
    dcp_to_torch_save(checkpoint, whole)
    state = torch.load(whole, weights_only=False)
    return {float(v["step"]) for v in state["optim"]["state"].values()}


def test_weights_only_starts_at_step_0_with_the_source_weights(start_trainer, tmp_path, source):
    weights_only = [
        *EVERY_4,
        f"trainer.resume_from={source.run_dir}",  # a run dir: its newest committed, 12
        "trainer.resume_weights_only=true",
    ]
    result = start_trainer(2, [*weights_only, "trainer.max_steps=2"]).finish()
    assert result.returncode == 0, result.stderr
    newest = f"{source.run_dir}/checkpoints/step-00000012"
    assert f"started from {newest} (trainer.resume_from; weights only" in result.stdout
    # Step 0's eval is the loaded weights' loss on the same held-out data: the source's last.
    assert evals(result.run_dir)[0] == pytest.approx(evals(source.run_dir)[12], rel=1e-6)
    records = [r for r in read_metrics(result.run_dir) if "loss" in r]
    assert [r["step"] for r in records] == [1, 2]
    source_lr = {r["step"]: r["lr"] for r in read_metrics(source.run_dir) if "lr" in r}
    assert [r["lr"] for r in records] == [source_lr[1], source_lr[2]]  # a fresh warmup
    run_dir = Path(result.run_dir)
    assert committed_steps(run_dir) == [2]
    assert optimizer_steps(run_dir / "checkpoints/step-00000002", tmp_path) == {2.0}

    # A restart resumes from the run's own checkpoint, not from the source again.
    again = start_trainer(2, [*weights_only, "trainer.max_steps=4"]).finish()
    assert again.returncode == 0, again.stderr
    assert f"resumed from {run_dir}/checkpoints/step-00000002 at step 2" in again.stdout
    assert "started from" not in again.stdout
    assert sorted(losses_by_step(result.run_dir)) == [1, 2, 3, 4]


@pytest.fixture
def uncommitted(tmp_path: Path, source: TrainerResult) -> str:
    """A copy of the source's step 12 without its COMMITTED marker."""
    step = tmp_path / "torn/checkpoints/step-00000012"
    shutil.copytree(Path(source.run_dir) / "checkpoints/step-00000012", step)
    (step / "COMMITTED").unlink()
    return str(step)


BAD = {
    "unknown run": ("{tmp}/nowhere", "'{tmp}/nowhere' does not exist"),
    "missing step": ("{src}/checkpoints/step-00000005", "has no checkpoint step 5; committed"),
    "not a checkpoint": ("{tmp}", "has no checkpoints"),
    "uncommitted": ("{torn}", "step-00000012 is not committed"),
}


@pytest.mark.parametrize("value, message", BAD.values(), ids=BAD.keys())
def test_bad_resume_from_is_one_line_exit_2(tmp_path, capsys, source, uncommitted, value, message):
    names = {"tmp": str(tmp_path), "src": source.run_dir, "torn": uncommitted}
    value, message = value.format(**names), message.format(**names)
    run_dir = tmp_path / "new"
    config = tmp_path / "job.yaml"
    config.write_text(f"run_dir: {run_dir}\n")
    assert main(["--config", str(config), f"trainer.resume_from={value}"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: trainer.resume_from: ") and message in err, err
    assert err.count("\n") == 1
    assert not run_dir.exists()


def test_a_checkpoint_of_another_architecture_does_not_fit(tmp_path, capsys, source):
    config = tmp_path / "job.yaml"
    config.write_text(f"run_dir: {tmp_path / 'new'}\n")
    small = ["model.dim=64", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2"]
    overrides = [*small, "model.ffn_hidden_dim=96", f"trainer.resume_from={source.run_dir}"]
    assert main(["--config", str(config), *overrides]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: trainer.resume_from: ") and "does not fit the model" in err
    assert "is [128, 64], the model needs [96, 64]" in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "new").exists()


def test_weights_only_needs_resume_from(tmp_path, capsys):
    config = tmp_path / "job.yaml"
    config.write_text(f"run_dir: {tmp_path / 'new'}\n")
    assert main(["--config", str(config), "trainer.resume_weights_only=true"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: trainer.resume_weights_only: needs trainer.resume_from"), err
    assert not (tmp_path / "new").exists()


def test_a_lora_run_resumes_from_another_lora_runs_adapters(start_trainer, tmp_path):
    """A LoRA checkpoint holds the adapters alone: resume_from loads them over init_from's
    base and continues the source exactly; a full model cannot start from it (exit 2)."""
    from testing_support.hf_models import build_llama, word_corpus
    from tests.hf.test_hf_finetune_export import finetune_args

    base = str(build_llama(tmp_path / "hf", tied=False))
    corpus = word_corpus(tmp_path / "words.jsonl", docs=60)
    lora = ["model.lora.rank=4", "model.lora.alpha=8", "model.lora.targets=[q_proj,v_proj]"]
    every_2 = [*lora, "trainer.checkpoint.interval=2", "trainer.max_steps=4"]
    source_run = str(tmp_path / "lora-source")
    source = start_trainer(
        2, finetune_args(base, corpus, *every_2), run_dir=source_run, small=False
    )
    assert source.finish().returncode == 0
    assert committed_steps(Path(source_run)) == [2, 4]

    step_2 = f"{source_run}/checkpoints/step-00000002"
    args = finetune_args(base, corpus, *every_2, f"trainer.resume_from={step_2}")
    result = start_trainer(2, args, small=False).finish()
    assert result.returncode == 0, result.stderr
    assert f"started from {step_2} (trainer.resume_from; at step 2)" in result.stdout
    expected = {s: v for s, v in losses_by_step(source_run).items() if s > 2}
    assert losses_by_step(result.run_dir) == expected

    full = finetune_args(base, corpus, f"trainer.resume_from={source_run}")
    refused = start_trainer(0, full, run_dir=str(tmp_path / "full"), small=False).finish()
    assert refused.returncode == EXIT_BAD_INPUT, refused.stderr
    assert "does not fit the model (lacks " in refused.stderr, refused.stderr
    assert refused.stderr.strip().count("\n") == 0
