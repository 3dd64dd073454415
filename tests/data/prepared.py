"""Test helpers for `data prepare`: JSONL corpora on disk, and prepared datasets read back
with numpy straight from the format (`trainer.data.shard_format`), independent of any reader."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trainer.data.shard_format import DTYPES, MANIFEST, Manifest


def write_jsonl(path: Path, records: list, compress: str = "") -> Path:
    data = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records).encode()
    if compress == "gz":
        data = gzip.compress(data)
    elif compress == "zst":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def texts(count: int, seed: int = 0, words: int = 30) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = ["alpha", "beta", "gamma", "delta", "émoji 🙂", "zeta", "eta,", "theta."]
    return [
        " ".join(vocab[i] for i in rng.integers(0, len(vocab), rng.integers(1, words)))
        for _ in range(count)
    ]


def read_local(root: Path) -> Callable[[str], bytes]:
    return lambda rel: (root / rel).read_bytes()


def read_s3(client, bucket: str, prefix: str) -> Callable[[str], bytes]:
    return lambda rel: client.get_object(Bucket=bucket, Key=f"{prefix}/{rel}")["Body"].read()


def load(read: Callable[[str], bytes], split: str) -> tuple[Manifest, list[np.ndarray], list]:
    """(manifest, documents of `split` in manifest order, their loss masks or None)."""
    manifest = Manifest.from_json(read(MANIFEST).decode())
    width = DTYPES[manifest.dtype]
    docs, masks = [], []
    for shard in manifest.split(split):
        tokens = np.frombuffer(read(shard.file("tokens")), dtype=f"<u{width}")
        starts = np.frombuffer(read(shard.file("docs")), dtype="<u8")
        assert len(tokens) == shard.tokens and len(starts) == shard.documents
        bits = None
        if shard.has_mask:
            raw = np.frombuffer(read(shard.file("mask")), dtype=np.uint8)
            bits = np.unpackbits(raw, bitorder="little")[: len(tokens)].astype(bool)
        ends = [*starts[1:].tolist(), len(tokens)]
        for start, end in zip(starts.tolist(), ends, strict=True):
            docs.append(tokens[start:end])
            masks.append(None if bits is None else bits[start:end])
    return manifest, docs, masks
