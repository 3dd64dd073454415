"""Real torchrun runs on prepared datasets: 2 ranks train on memory-mapped shards, resume
bit-exactly, hand over to 1 rank; a mixture reports the tokens each source gave, exactly
across a resume; a manifest of another tokenizer is refused before any rank starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contract.config import EXIT_BAD_INPUT
from tests.trainer.harness import TrainerResult, launch_trainer, losses_by_step, read_metrics
from tests.trainer.prepared import masked_documents, text_documents, write_prepared

pytestmark = pytest.mark.slow

EVERY_2 = ["trainer.checkpoint.interval=2"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prepared")
    write_prepared(root / "web", text_documents(300, seed=1), text_documents(20, seed=2))
    write_prepared(
        root / "chat",
        masked_documents(200, seed=3),
        masked_documents(20, seed=4),
        isolate_documents=True,
    )
    return {"web": root / "web", "chat": root / "chat"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, datasets) -> TrainerResult:
    work = tmp_path_factory.mktemp("reference")
    args = [*EVERY_2, f"data.path={datasets['chat']}/manifest.json", "trainer.eval_interval=4"]
    result = launch_trainer(work, 2, args).finish()
    assert result.returncode == 0, result.stderr
    assert sorted(losses_by_step(result.run_dir)) == list(range(1, 9))
    return result


def test_two_ranks_train_on_a_prepared_dataset_and_resume_exactly(
    run_trainer, tmp_path: Path, datasets, reference: TrainerResult
):
    records = read_metrics(reference.run_dir)
    assert any("eval_loss" in r for r in records)  # the eval split is read too
    assert all(r["time/data_wait_s"] >= 0 for r in records if "loss" in r)
    run_dir = tmp_path / "run"
    step4 = Path(reference.run_dir) / "checkpoints/step-00000004"
    shutil.copytree(step4, run_dir / "checkpoints/step-00000004")
    args = [*EVERY_2, f"data.path={datasets['chat']}", "trainer.eval_interval=4"]
    resumed = run_trainer(2, args)
    assert resumed.returncode == 0, resumed.stderr
    assert "at step 4" in resumed.stdout
    expected = losses_by_step(reference.run_dir)
    assert losses_by_step(str(run_dir)) == {s: expected[s] for s in range(5, 9)}


def test_two_ranks_hand_over_to_one(run_trainer, tmp_path: Path, datasets, reference):
    run_dir = tmp_path / "run"
    step4 = Path(reference.run_dir) / "checkpoints/step-00000004"
    shutil.copytree(step4, run_dir / "checkpoints/step-00000004")
    args = [*EVERY_2, f"data.path={datasets['chat']}", "trainer.global_batch_size=4"]
    result = run_trainer(0, args)
    assert result.returncode == 0, result.stderr
    resumed, expected = losses_by_step(str(run_dir)), losses_by_step(reference.run_dir)
    assert sorted(resumed) == [5, 6, 7, 8]
    for step in resumed:  # same data; only the order of float additions differs
        assert resumed[step] == pytest.approx(expected[step], rel=1e-4)


def test_a_mixture_reports_tokens_per_source_exactly_across_a_resume(
    run_trainer, tmp_path: Path, datasets
):
    web, chat = datasets["web"], datasets["chat"]
    mixture = [f"data.mixture=[{{path: {web}, weight: 3}}, {{path: {chat}, weight: 1}}]"]
    args = [*EVERY_2, "data.path=null", *mixture, "trainer.max_steps=4"]
    first = run_trainer(2, args)
    assert first.returncode == 0, first.stderr
    resumed = run_trainer(2, [*EVERY_2, "data.path=null", *mixture, "trainer.max_steps=8"])
    assert resumed.returncode == 0, resumed.stderr
    assert "at step 4" in resumed.stdout
    records = [r for r in read_metrics(str(tmp_path / "run")) if "loss" in r]
    assert [r["step"] for r in records] == list(range(1, 9))
    for r in records:
        by_source = [r[f"data/tokens_seen/{web}"], r[f"data/tokens_seen/{chat}"]]
        assert sum(by_source) == r["tokens_seen"]
    last = records[-1]  # 8 steps x 4 samples x 32 tokens, 3:1
    assert [last[f"data/tokens_seen/{web}"], last[f"data/tokens_seen/{chat}"]] == [768, 256]


def test_a_dataset_of_another_tokenizer_is_refused_in_one_line(run_trainer, tmp_path: Path):
    write_prepared(tmp_path / "other", text_documents(50), fingerprint="sha256:feed")
    result = run_trainer(0, [f"data.path={tmp_path / 'other'}"])
    assert result.returncode == EXIT_BAD_INPUT
    assert "data.path:" in result.stderr and "sha256:feed" in result.stderr
    assert not (tmp_path / "run/checkpoints").exists()


def test_the_same_dataset_on_s3_trains_the_same_losses(
    run_trainer, datasets, reference: TrainerResult, s3_direct, s3_bucket
):
    client = s3_direct.client()
    for path in datasets["chat"].rglob("*"):
        if path.is_file():
            client.upload_file(str(path), s3_bucket, f"chat/{path.relative_to(datasets['chat'])}")
    args = [*EVERY_2, f"data.path=s3://{s3_bucket}/chat", "trainer.eval_interval=4"]
    result = run_trainer(2, args)
    assert result.returncode == 0, result.stderr
    assert losses_by_step(result.run_dir) == losses_by_step(reference.run_dir)
    evals = [r["eval_loss"] for r in read_metrics(result.run_dir) if "eval_loss" in r]
    assert evals == [r["eval_loss"] for r in read_metrics(reference.run_dir) if "eval_loss" in r]
