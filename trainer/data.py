"""JSONL documents -> packed token sequences, in an order that is a function of the seed only.

The whole token stream is packed into sequences of `seq_len + 1` tokens (inputs and their
next-token targets). Training visits them in a seeded permutation per epoch, and global
sample index g always means the same sequence: step s consumes indices [s*G, (s+1)*G) for a
global batch G, and each rank takes its own disjoint rows. The data position is therefore a
single counter (samples consumed) — resume is exact, and N ranks can hand over to M.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.config import DataConfig
from trainer.errors import ConfigError
from trainer.storage import StorageError, read_uri_bytes
from trainer.tokenizer import Tokenizer


@dataclass
class Corpus:
    train_tokens: torch.Tensor
    eval_tokens: torch.Tensor


def read_documents(cfg: DataConfig) -> tuple[list[str], int]:
    """Texts of the JSONL file and the number of malformed lines (fatal above the limit)."""
    if "://" not in cfg.path and not Path(cfg.path).is_file():
        raise ConfigError(f"data.path: no such file {cfg.path!r} (a JSONL file or s3:// URI)")
    try:
        raw = read_uri_bytes(cfg.path)
    except StorageError as exc:
        raise ConfigError(f"data.path: {exc}") from None
    texts, bad, first_bad, lines = [], 0, None, 0
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        lines += 1
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        text = record.get(cfg.text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            bad += 1
            first_bad = first_bad or number
        elif text:
            texts.append(text)
    if bad and bad > cfg.max_bad_fraction * lines:
        raise ConfigError(
            f"data.path: {bad} of {lines} lines ({100 * bad / lines:.1f}%) of {cfg.path!r} are "
            f"not JSON objects with a string {cfg.text_field!r} field (first: line {first_bad}); "
            f"data.max_bad_fraction allows {cfg.max_bad_fraction}"
        )
    if not texts:
        raise ConfigError(
            f"data.path: {cfg.path!r} holds no documents (no line with a non-empty "
            f"{cfg.text_field!r} field; set data.text_field to the key holding the text)"
        )
    return texts, bad


def load_corpus(cfg: DataConfig, tokenizer: Tokenizer) -> Corpus:
    texts, _ = read_documents(cfg)
    # Every k-th document is held out: deterministic, and independent of the seed so that
    # validation losses of different seeds are comparable.
    every = round(1 / cfg.eval_fraction) if cfg.eval_fraction > 0 else 0
    train, held_out = [], []
    for index, text in enumerate(texts):
        is_eval = every > 0 and index % every == every - 1
        (held_out if is_eval else train).append(text)
    return Corpus(train_tokens=_pack(train, tokenizer), eval_tokens=_pack(held_out, tokenizer))


def _pack(texts: list[str], tokenizer: Tokenizer) -> torch.Tensor:
    eos = torch.tensor([tokenizer.eos_id], dtype=torch.int64)
    parts = [t for text in texts for t in (tokenizer.encode(text), eos)]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)


class PackedSequences:
    """Fixed-length windows over a token stream; window i covers tokens [i*L, i*L + L + 1)."""

    def __init__(self, tokens: torch.Tensor, seq_len: int):
        self.tokens, self.seq_len = tokens, seq_len
        self.count = max(0, (len(tokens) - 1) // seq_len)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = indices[:, None] * self.seq_len + torch.arange(self.seq_len + 1)
        window = self.tokens[offsets]
        return window[:, :-1], window[:, 1:]


class TrainBatches:
    """The micro batches of one rank for the optimizer step that starts at global index `start`."""

    def __init__(self, sequences: PackedSequences, *, seed: int, dp_rank: int, dp_size: int):
        self.sequences, self.seed = sequences, seed
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self._perm_epoch, self._perm = -1, torch.empty(0, dtype=torch.int64)

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._perm_epoch:
            generator = torch.Generator().manual_seed(self.seed * 7919 + epoch)
            self._perm = torch.randperm(self.sequences.count, generator=generator)
            self._perm_epoch = epoch
        return self._perm

    def sequence_ids(self, global_indices: torch.Tensor) -> torch.Tensor:
        count = self.sequences.count
        out = torch.empty_like(global_indices)
        for epoch in global_indices.div(count, rounding_mode="floor").unique().tolist():
            mask = global_indices // count == epoch
            out[mask] = self._permutation(epoch)[global_indices[mask] % count]
        return out

    def micro_batches(
        self, start: int, micro_batch_size: int, accum_steps: int
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Micro batch m of rank r holds global rows m*(micro*dp) + r*micro + [0, micro)."""
        batches = []
        for micro in range(accum_steps):
            first = start + (micro * self.dp_size + self.dp_rank) * micro_batch_size
            rows = torch.arange(first, first + micro_batch_size)
            batches.append(self.sequences.batch(self.sequence_ids(rows)))
        return batches


def eval_batches(
    sequences: PackedSequences, *, dp_rank: int, dp_size: int, micro_batch_size: int, count: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same held-out rows at every evaluation, split disjointly across ranks."""
    if sequences.count == 0:
        return []
    batches = []
    for micro in range(count):
        first = (micro * dp_size + dp_rank) * micro_batch_size
        rows = torch.arange(first, first + micro_batch_size) % sequences.count
        batches.append(sequences.batch(rows))
    return batches
