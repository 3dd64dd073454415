"""Worker side of `data prepare`: one chunk of JSONL lines -> token ids, document lengths and
loss-mask bits, through the trainer's own `data.format` (so prepared data and the small-JSONL
path frame documents identically).

`data.format=text` with a Hugging Face tokenizer takes the fast path: the texts of the whole
chunk go through the tokenizer's batch encoding at once. Other formats and the byte tokenizer
encode record by record with `trainer.data.formats`.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass

import numpy as np

from contract.config import DataConfig
from trainer.data.formats import build_format
from trainer.data.records import BadRecord, string_field
from trainer.tokenizer import Tokenizer, build_tokenizer

_ANY_VOCAB = 1 << 40
"""prepare has no model: any vocabulary size fits (the trainer checks its own model)."""


@dataclass
class Encoded:
    tokens: np.ndarray
    """uint32 ids of every document of the chunk, back to back."""
    lengths: np.ndarray
    """int64 tokens per document."""
    mask: np.ndarray | None
    """bool per token, True = a training target; None when every token is one."""
    lines: int
    """Non-blank lines read."""
    bad: int
    first_bad: str
    """`line N: why` of the first malformed line (N counted within the chunk), or ''."""


def load_tokenizer(cfg: DataConfig) -> Tokenizer:
    return build_tokenizer(cfg.tokenizer or "byte", _ANY_VOCAB, cfg.eos_token)


class ChunkEncoder:
    def __init__(self, cfg: DataConfig) -> None:
        self.cfg = cfg
        self.tokenizer = load_tokenizer(cfg)
        self.form = build_format(cfg, self.tokenizer)
        self.has_mask = cfg.format != "text"
        self._batch = getattr(self.tokenizer, "encode_documents", None)

    def encode(self, lines: list[bytes]) -> Encoded:
        records, bad, first_bad = [], 0, ""
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
                bad += 1
                first_bad = first_bad or f"line {number}: not JSON"
                records.append(_BAD)
        count = sum(1 for r in records if r is not _BAD)
        if self.cfg.format == "text" and self._batch is not None:
            tokens, lengths, more_bad, why = self._texts(records)
            mask = None
        else:
            docs, masks, more_bad, why = self._documents(records)
            tokens = _flatten(docs)
            lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
            mask = np.concatenate(masks) if masks else (_empty() if self.has_mask else None)
        return Encoded(
            tokens=tokens,
            lengths=lengths,
            mask=mask,
            lines=count + bad,
            bad=bad + more_bad,
            first_bad=first_bad or why,
        )

    def _texts(self, records: list) -> tuple[np.ndarray, np.ndarray, int, str]:
        texts, bad, why = [], 0, ""
        for index, record in enumerate(records):
            if record is _BAD:
                continue
            try:
                text = string_field(record, self.cfg.text_field)
            except BadRecord as exc:
                bad += 1
                why = why or f"record {index + 1}: {exc}"
                continue
            if text:
                texts.append(text)
        if not texts:
            return np.zeros(0, np.uint32), np.zeros(0, np.int64), bad, why
        tokens, lengths = self._batch(texts)  # type: ignore[misc]
        return tokens, lengths, bad, why

    def _documents(self, records: list) -> tuple[list, list, int, str]:
        docs, masks, bad, why = [], [], 0, ""
        for index, record in enumerate(records):
            if record is _BAD:
                continue
            try:
                document = self.form.extract(record)
            except BadRecord as exc:
                bad += 1
                why = why or f"record {index + 1}: {exc}"
                continue
            if document is None:
                continue
            docs.append(document.tokens.numpy())
            if self.has_mask:
                mask = document.loss_mask
                masks.append(np.ones(len(document.tokens), bool) if mask is None else mask.numpy())
        return docs, masks, bad, why


_BAD = object()


def _flatten(docs: list) -> np.ndarray:
    if docs and isinstance(docs[0], np.ndarray):
        return np.concatenate(docs).astype(np.uint32)
    total = sum(len(d) for d in docs)
    return np.fromiter(itertools.chain.from_iterable(docs), dtype=np.uint32, count=total)


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=bool)


# -- the worker process: one encoder per process, built once ---------------------------------
_encoder: ChunkEncoder | None = None


def init_worker(cfg: DataConfig) -> None:
    global _encoder
    # Each worker tokenizes on one thread: the processes are the parallelism (a Rust thread
    # pool per process on top would only oversubscribe the cores).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _encoder = ChunkEncoder(cfg)


def encode_in_worker(lines: list[bytes]) -> Encoded:
    assert _encoder is not None, "init_worker was not called"
    return _encoder.encode(lines)
