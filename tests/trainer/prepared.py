"""Small prepared datasets written with numpy straight from `trainer.data.shard_format`, for
the reader's tests (the writer, `trainstack data prepare`, has its own)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trainer.data.shard_format import MANIFEST, Manifest, Shard, Source, token_dtype
from trainer.tokenizer.byte import ByteTokenizer

Doc = tuple[np.ndarray, np.ndarray | None]
"""A document's token ids and its loss mask (None: every token is a target)."""


def text_documents(count: int, seed: int = 0, longest: int = 90) -> list[Doc]:
    """Byte-tokenizer documents of random lengths (each ends with the end-of-text id)."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(count):
        body = rng.integers(0, 256, size=int(rng.integers(1, longest)))
        docs.append((np.append(body, ByteTokenizer.eos_id), None))
    return docs


def masked_documents(count: int, seed: int = 0) -> list[Doc]:
    """Prompt/completion-like documents: the first part of each is not a target."""
    docs = []
    for tokens, _ in text_documents(count, seed):
        mask = np.ones(len(tokens), dtype=bool)
        mask[: len(tokens) // 2] = False
        docs.append((tokens, mask))
    return docs


def write_prepared(
    root: Path,
    train: list[Doc],
    eval_docs: list[Doc] = (),
    *,
    docs_per_shard: int = 7,
    isolate_documents: bool = False,
    fingerprint: str = ByteTokenizer.fingerprint,
    vocab_size: int = ByteTokenizer.vocab_size,
) -> Manifest:
    """Shards of `docs_per_shard` documents per split, then the manifest (last)."""
    dtype = token_dtype(vocab_size)
    has_mask = any(m is not None for _, m in [*train, *eval_docs])
    shards = []
    for split, docs in (("train", train), ("eval", list(eval_docs))):
        (root / split).mkdir(parents=True, exist_ok=True)
        for first in range(0, len(docs), docs_per_shard):
            part = docs[first : first + docs_per_shard]
            shard = Shard(split, f"{first:05d}", sum(len(t) for t, _ in part), len(part), has_mask)
            tokens = np.concatenate([t for t, _ in part]).astype(np.dtype(dtype).newbyteorder("<"))
            (root / shard.file("tokens")).write_bytes(tokens.tobytes())
            lengths = np.array([len(t) for t, _ in part], dtype=np.int64)
            starts = (np.cumsum(lengths) - lengths).astype("<u8")
            (root / shard.file("docs")).write_bytes(starts.tobytes())
            if has_mask:
                bits = np.concatenate(
                    [m if m is not None else np.ones(len(t), dtype=bool) for t, m in part]
                )
                (root / shard.file("mask")).write_bytes(
                    np.packbits(bits, bitorder="little").tobytes()
                )
            shards.append(shard)
    manifest = Manifest(
        dtype=dtype,
        vocab_size=vocab_size,
        tokenizer_fingerprint=fingerprint,
        data_format="prompt_completion" if isolate_documents else "text",
        isolate_documents=isolate_documents,
        sources=[Source("test://documents", 0, "0")],
        shards=shards,
    )
    (root / MANIFEST).write_text(manifest.to_json())
    return manifest


def manifest_of(root: Path) -> dict:
    return json.loads((root / MANIFEST).read_text())
