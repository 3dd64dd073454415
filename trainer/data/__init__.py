"""JSONL records -> tokenized documents (`data.format`) -> one token stream per split ->
fixed-length sequences, visited in an order that is a function of the seed only."""

from __future__ import annotations

from dataclasses import dataclass

from trainer.config import DataConfig
from trainer.data.formats import FORMATS, Document, Format, build_format
from trainer.data.order import TrainBatches, eval_batches
from trainer.data.packing import IGNORE_INDEX, Batch, PackedSequences, TokenStream
from trainer.data.records import read_records
from trainer.errors import ConfigError
from trainer.tokenizer import Tokenizer


@dataclass
class Corpus:
    train: TokenStream
    eval: TokenStream


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
    documents, _ = _read(cfg, form)
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
    )


__all__ = [
    "FORMATS",
    "IGNORE_INDEX",
    "Batch",
    "Corpus",
    "Document",
    "PackedSequences",
    "TokenStream",
    "TrainBatches",
    "eval_batches",
    "load_corpus",
    "read_documents",
]
