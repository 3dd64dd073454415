"""A prepared dataset's split as a `SequenceSource`: windows read from the token shards on
demand, never the corpus.

The shards of a split, in manifest order, are one token stream; window i covers tokens
[i*L, i*L + L + 1), across shard boundaries. A window's tokens, loss-mask bits and document
starts become a one-window `TokenStream`, so `PackedSequences` builds exactly the batch fields
it builds for the same tokens held in memory. Start-up reads the manifest only.

On S3 every window costs a ranged GET or two, so `prefetch` (called by `TrainBatches` with the
rows of the next steps: the order is known in advance) reads them on a thread pool into a
bounded cache; a row asked for before its read finished waits for it (that wait is the step's
`time/data_wait_s`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from trainer.data.packing import Batch, PackedSequences, TokenStream
from trainer.data.shard_files import ShardFiles, open_shard_files, read_manifest_text
from trainer.data.shard_format import Manifest, Shard
from trainer.data.sources import concat_batches
from trainer.errors import ConfigError


@dataclass
class PreparedDataset:
    root: str
    manifest: Manifest
    files: ShardFiles


def open_prepared(root: str, *, fingerprint: str, vocab_size: int, key: str) -> PreparedDataset:
    """The manifest under `root`, checked against the trainer's tokenizer and model."""
    manifest = Manifest.from_json(read_manifest_text(root), where=f"{root}/manifest.json")
    if manifest.tokenizer_fingerprint != fingerprint:
        raise ConfigError(
            f"{key}: {root} was prepared with tokenizer {manifest.tokenizer_fingerprint!r}, but "
            f"this run's data.tokenizer is {fingerprint!r}; prepare it again with this tokenizer"
        )
    if manifest.vocab_size > vocab_size:
        raise ConfigError(
            f"{key}: {root} holds ids of a {manifest.vocab_size}-token vocabulary; "
            f"model.vocab_size is {vocab_size}"
        )
    return PreparedDataset(root, manifest, open_shard_files(root))


@dataclass
class Window:
    tokens: np.ndarray
    mask: np.ndarray | None
    doc_starts: np.ndarray
    """Document starts relative to the window's first token; the first is <= 0."""


class PreparedSequences:
    """The `split` of a prepared dataset as fixed-length windows (a `SequenceSource`)."""

    def __init__(
        self,
        dataset: PreparedDataset,
        split: str,
        seq_len: int,
        *,
        cache_windows: int = 4096,
        workers: int = 16,
    ):
        self.files, self.seq_len = dataset.files, seq_len
        self.isolate = dataset.manifest.isolate_documents
        self._dtype = dataset.manifest.dtype
        self.shards: list[Shard] = dataset.manifest.split(split)
        self.has_mask = any(s.has_mask for s in self.shards)
        self.offsets = np.cumsum([0, *[s.tokens for s in self.shards]], dtype=np.int64)
        self.count = max(0, (int(self.offsets[-1]) - 1) // seq_len)
        self._cache: OrderedDict[int, Future] = OrderedDict()
        self._cache_windows = cache_windows
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, "prefetch") if self.files.remote else None

    def window(self, index: int) -> Window:
        start, stop = index * self.seq_len, index * self.seq_len + self.seq_len + 1
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        tokens, masks, starts = [], [], []
        j = first
        while j < len(self.shards) and self.offsets[j] < stop:
            shard, base = self.shards[j], int(self.offsets[j])
            lo, hi = max(start, base) - base, min(stop, int(self.offsets[j + 1])) - base
            if hi > lo:
                tokens.append(self.files.read(shard.file("tokens"), self._dtype, lo, hi))
                if self.has_mask:
                    masks.append(self._mask(shard, lo, hi))
                if self.isolate:
                    starts.append(self._doc_starts(shard, lo, hi) + (base - start))
            j += 1
        return Window(
            np.concatenate(tokens).astype(np.int64),
            np.concatenate(masks) if self.has_mask else None,
            np.concatenate(starts) if self.isolate else np.zeros(1, dtype=np.int64),
        )

    def _mask(self, shard: Shard, lo: int, hi: int) -> np.ndarray:
        if not shard.has_mask:
            return np.ones(hi - lo, dtype=bool)
        packed = self.files.read(shard.file("mask"), "uint8", lo // 8, (hi + 7) // 8)
        bits = np.unpackbits(packed, bitorder="little")
        return bits[lo % 8 : lo % 8 + hi - lo].astype(bool)

    def _doc_starts(self, shard: Shard, lo: int, hi: int) -> np.ndarray:
        """Starts (within the shard) of the document holding token lo and of every later one
        that starts before hi."""
        rel, count = shard.file("docs"), shard.documents
        first = self.files.searchsorted(rel, count, lo, "right") - 1
        last = self.files.searchsorted(rel, count, hi, "left")
        return self.files.read(rel, "uint64", first, last).astype(np.int64)

    def _row(self, index: int) -> Window:
        with self._lock:
            future = self._cache.pop(index, None)
        return future.result() if future is not None else self.window(index)

    def batch(self, indices: torch.Tensor) -> Batch:
        rows = []
        for index in indices.tolist():
            w = self._row(index)
            stream = TokenStream(
                torch.from_numpy(w.tokens),
                None if w.mask is None else torch.from_numpy(w.mask),
                torch.from_numpy(w.doc_starts),
                self.isolate,
            )
            rows.append(
                PackedSequences(stream, self.seq_len).batch(torch.zeros(1, dtype=torch.int64))
            )
        return concat_batches(rows)

    def prefetch(self, indices: torch.Tensor) -> None:
        if self._pool is None:
            return  # memory-mapped: the kernel's readahead and page cache do this
        with self._lock:
            for index in indices.tolist():
                if index not in self._cache:
                    self._cache[index] = self._pool.submit(self.window, index)
            while len(self._cache) > self._cache_windows:
                self._cache.popitem(last=False)[1].cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
