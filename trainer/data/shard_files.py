"""Slices of a prepared dataset's files, without reading the files whole.

`LocalShardFiles` memory-maps each file (a local disk or an FSx for Lustre mount): the page
cache holds what was read, and nothing counts against the process until it is touched.
`S3ShardFiles` asks S3 for byte ranges (one ranged GET per slice, through the trainer's boto3
client and its bounded retries); binary searches over a `.docs` file read fixed blocks, kept
in a small LRU.
"""

from __future__ import annotations

import mmap
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

import numpy as np

from trainer.data.shard_format import MANIFEST
from trainer.errors import ConfigError
from trainer.storage import StorageError, read_uri_bytes
from trainer.storage.s3 import S3_SCHEME, make_s3_client, s3_errors, split_s3_uri

DOCS_BLOCK = 8192
"""Offsets per `.docs` block an S3 binary search reads (64 KiB)."""


class ShardFiles(Protocol):
    root: str
    remote: bool

    def read(self, rel: str, dtype: str, start: int, stop: int) -> np.ndarray:
        """Elements [start, stop) of the file as a little-endian `dtype` array."""
        ...

    def searchsorted(self, rel: str, count: int, value: int, side: str) -> int:
        """np.searchsorted over the uint64 file of `count` elements."""
        ...


def prepared_root(path: str) -> str | None:
    """The dataset root `path` names (its manifest, or the directory/prefix holding it), or
    None for anything else (a JSONL file)."""
    if path.rstrip("/").endswith(MANIFEST):
        return path.rstrip("/")[: -len(MANIFEST)].rstrip("/") or "."
    if path.startswith(S3_SCHEME):
        last = path.rstrip("/").rsplit("/", 1)[-1]
        return None if "." in last else path.rstrip("/")
    return path if Path(path).is_dir() else None


def read_manifest_text(root: str) -> str:
    uri = f"{root}/{MANIFEST}"
    try:
        return read_uri_bytes(uri).decode()
    except StorageError as exc:
        raise ConfigError(f"data.path: no prepared-dataset manifest at {uri}: {exc}") from None


def open_shard_files(root: str) -> ShardFiles:
    return S3ShardFiles(root) if root.startswith(S3_SCHEME) else LocalShardFiles(root)


class LocalShardFiles:
    remote = False

    def __init__(self, root: str):
        self.root = root
        self._maps: dict[tuple[str, str], np.ndarray] = {}
        self._lock = threading.Lock()

    def _map(self, rel: str, dtype: str) -> np.ndarray:
        key = (rel, dtype)
        with self._lock:
            if key not in self._maps:
                path = Path(self.root) / rel
                if path.stat().st_size == 0:  # mmap refuses an empty file
                    self._maps[key] = np.empty(0, dtype=np.dtype(dtype).newbyteorder("<"))
                else:
                    with path.open("rb") as file:
                        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
                    # Windows are read in a shuffled order: the kernel's readahead would fault
                    # in (on a network file system: fetch) ~128 KiB around each one.
                    mapped.madvise(mmap.MADV_RANDOM)
                    self._maps[key] = np.frombuffer(mapped, np.dtype(dtype).newbyteorder("<"))
            return self._maps[key]

    def read(self, rel: str, dtype: str, start: int, stop: int) -> np.ndarray:
        return np.array(self._map(rel, dtype)[start:stop])

    def searchsorted(self, rel: str, count: int, value: int, side: str) -> int:
        return int(np.searchsorted(self._map(rel, "uint64"), value, side=side))


class S3ShardFiles:
    remote = True

    def __init__(self, root: str, docs_blocks: int = 256):
        self.root = root
        self.bucket, self.prefix = split_s3_uri(root)
        self.client = make_s3_client()
        self._blocks: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._max_blocks = docs_blocks
        self._lock = threading.Lock()

    def read(self, rel: str, dtype: str, start: int, stop: int) -> np.ndarray:
        width = np.dtype(dtype).itemsize
        if stop <= start:
            return np.empty(0, dtype=np.dtype(dtype).newbyteorder("<"))
        key = f"{self.prefix}/{rel}" if self.prefix else rel
        with s3_errors("read", f"{S3_SCHEME}{self.bucket}/{key}"):
            body = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start * width}-{stop * width - 1}"
            )["Body"].read()
        return np.frombuffer(body, dtype=np.dtype(dtype).newbyteorder("<"))

    def _docs_block(self, rel: str, block: int, count: int) -> np.ndarray:
        with self._lock:
            if (rel, block) in self._blocks:
                self._blocks.move_to_end((rel, block))
                return self._blocks[(rel, block)]
        start = block * DOCS_BLOCK
        values = self.read(rel, "uint64", start, min(count, start + DOCS_BLOCK))
        with self._lock:
            self._blocks[(rel, block)] = values
            while len(self._blocks) > self._max_blocks:
                self._blocks.popitem(last=False)
        return values

    def searchsorted(self, rel: str, count: int, value: int, side: str) -> int:
        """Binary search over blocks (each block's first element), then within one block."""
        lo, hi = 0, (count + DOCS_BLOCK - 1) // DOCS_BLOCK  # blocks
        while hi - lo > 1:
            mid = (lo + hi) // 2
            first = int(self._docs_block(rel, mid, count)[0])
            if first < value or (side == "right" and first == value):
                lo = mid
            else:
                hi = mid
        if count == 0:
            return 0
        block = self._docs_block(rel, lo, count)
        return lo * DOCS_BLOCK + int(np.searchsorted(block, value, side=side))
