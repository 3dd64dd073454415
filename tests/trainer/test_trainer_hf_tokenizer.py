"""data.tokenizer=<dir>: a real Hugging Face tokenizer.json, trained here on the sample corpus
(nothing downloaded), drives a 2-rank run; a vocabulary larger than the model's is refused."""

from __future__ import annotations

import json
from pathlib import Path

from tests.trainer.harness import SAMPLE, SMALL_CORPUS_DOCS, read_metrics


def train_tokenizer(directory: Path, vocab_size: int) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = [
        json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()[:SMALL_CORPUS_DOCS]
    ]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "</s>"])
    tokenizer.train_from_iterator(texts, trainer)
    directory.mkdir()
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def test_hugging_face_tokenizer_trains(tmp_path, run_trainer):
    tok_dir = train_tokenizer(tmp_path / "tok", vocab_size=400)
    result = run_trainer(2, [f"data.tokenizer={tok_dir}", "model.vocab_size=400"])
    assert result.returncode == 0, result.stderr[-2000:]
    losses = [r["loss"] for r in read_metrics(result.run_dir) if "loss" in r]
    assert len(losses) == 8 and all(loss == loss for loss in losses)  # 8 steps, no NaN
    # BPE tokens carry more text than bytes: the first loss reflects a 400-way vocabulary.
    assert losses[0] > 5.0


def test_tokenizer_larger_than_model_vocabulary_is_refused(tmp_path, run_trainer):
    tok_dir = train_tokenizer(tmp_path / "tok", vocab_size=600)
    result = run_trainer(0, [f"data.tokenizer={tok_dir}", "model.vocab_size=512"])
    assert result.returncode == 2
    assert "data.tokenizer" in result.stderr and "model.vocab_size >= 600" in result.stderr
    assert not (Path(result.run_dir) / "checkpoints").exists()
