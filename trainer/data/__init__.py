"""Training data as `SequenceSource`s: a small JSONL file tokenized in memory (records ->
documents -> one token stream per split -> fixed-length sequences), or prepared token shards
read on demand (one dataset, or a weighted mixture); either is visited in an order that is a
function of the seed and the sample index only."""

from __future__ import annotations

from dataclasses import dataclass

from contract.config import DataConfig
from trainer.data.formats import FORMATS, Document, Format, build_format
from trainer.data.order import TrainBatches, eval_batches
from trainer.data.packing import IGNORE_INDEX, Batch, PackedSequences, TokenStream
from trainer.data.prepared import PreparedSequences, open_prepared
from trainer.data.records import read_records
from trainer.data.shard_files import prepared_root
from trainer.data.sources import ConcatSequences, SequenceSource
from trainer.errors import ConfigError
from trainer.tokenizer import Tokenizer


@dataclass
class Corpus:
    train: TokenStream
    eval: TokenStream
    malformed_lines: int = 0
    """Lines skipped as malformed (under data.max_bad_fraction, else reading failed)."""


def read_documents(cfg: DataConfig, tokenizer: Tokenizer) -> tuple[list[Document], int]:
    """The tokenized documents of the JSONL file and the number of malformed lines (fatal
    above data.max_bad_fraction)."""
    return _read(cfg, build_format(cfg, tokenizer))


def _read(cfg: DataConfig, form: Format) -> tuple[list[Document], int]:
    documents, bad = read_records(cfg, form.extract, form.expected)
    if not documents:
        raise ConfigError(
            f"data.path: {cfg.path!r} holds no documents (no line that is one of "
            f"{form.expected}; check data.format={cfg.format!r} and its field names)"
        )
    return documents, bad


def load_corpus(cfg: DataConfig, tokenizer: Tokenizer) -> Corpus:
    form = build_format(cfg, tokenizer)
    documents, bad = _read(cfg, form)
    isolate = form.isolate_documents
    # Every k-th document is held out: deterministic, and independent of the seed so that
    # validation losses of different seeds are comparable.
    every = round(1 / cfg.eval_fraction) if cfg.eval_fraction > 0 else 0
    train, held_out = [], []
    for index, document in enumerate(documents):
        is_eval = every > 0 and index % every == every - 1
        (held_out if is_eval else train).append(document)
    return Corpus(
        train=TokenStream.of(train, isolate_documents=isolate),
        eval=TokenStream.of(held_out, isolate_documents=isolate),
        malformed_lines=bad,
    )


@dataclass
class TrainingData:
    """What a run reads: its training sources (one, or a mixture) and the held-out rows."""

    train: list[SequenceSource]
    weights: list[float]
    names: list[str]
    """Each source's data path, as configured (metrics key the tokens seen by it)."""
    eval: SequenceSource
    malformed_lines: int = 0
    """Source lines skipped as malformed: read here, or recorded by `data prepare`."""

    def close(self) -> None:
        for source in [*self.train, self.eval]:
            if isinstance(source, PreparedSequences):
                source.close()


def open_training_data(cfg: DataConfig, tokenizer: Tokenizer, vocab_size: int) -> TrainingData:
    """The configured data as sources, checked (tokenizer, vocabulary, at least one sequence)
    before any rank starts; prepared data is opened, not read."""
    if cfg.mixture:
        entries = [(f"data.mixture[{i}].path", m.path, m.weight) for i, m in enumerate(cfg.mixture)]
    else:
        entries = [("data.path", str(cfg.path), 1.0)]
    train: list[SequenceSource] = []
    held_out: list[SequenceSource] = []
    malformed = 0
    for key, path, _ in entries:
        root = prepared_root(path)
        if root is None and cfg.mixture:
            raise ConfigError(f"{key}: {path!r} is not a prepared dataset (its manifest.json)")
        if root is None:
            corpus = load_corpus(cfg, tokenizer)
            malformed += corpus.malformed_lines
            pair: tuple[SequenceSource, SequenceSource] = (
                PackedSequences(corpus.train, cfg.seq_len),
                PackedSequences(corpus.eval, cfg.seq_len),
            )
        else:
            dataset = open_prepared(
                root, fingerprint=tokenizer.fingerprint, vocab_size=vocab_size, key=key
            )
            malformed += dataset.manifest.malformed_lines
            pair = (
                PreparedSequences(dataset, "train", cfg.seq_len),
                PreparedSequences(dataset, "eval", cfg.seq_len),
            )
        if pair[0].count == 0:
            raise ConfigError(
                f"{key}: {path!r} has fewer training tokens than one sequence of "
                f"data.seq_len={cfg.seq_len} + 1"
            )
        train.append(pair[0])
        held_out.append(pair[1])
    return TrainingData(
        train=train,
        weights=[w for _, _, w in entries],
        names=[p for _, p, _ in entries],
        eval=held_out[0] if len(held_out) == 1 else ConcatSequences(held_out),
        malformed_lines=malformed,
    )


__all__ = [
    "FORMATS",
    "IGNORE_INDEX",
    "Batch",
    "Corpus",
    "Document",
    "PackedSequences",
    "PreparedSequences",
    "SequenceSource",
    "TokenStream",
    "TrainBatches",
    "TrainingData",
    "eval_batches",
    "load_corpus",
    "open_training_data",
    "read_documents",
]
