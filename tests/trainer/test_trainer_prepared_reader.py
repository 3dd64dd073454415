"""The shard reader hands the step exactly what the in-memory path hands it for the same
documents: windows across shard boundaries, loss-mask bits, isolated documents; locally
memory-mapped and on S3 by byte range (moto), with prefetch. Bad manifests are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.prepared import masked_documents, text_documents, write_prepared
from trainer.data import PackedSequences, TokenStream
from trainer.data.formats import Document
from trainer.data.prepared import PreparedSequences, open_prepared
from trainer.data.shard_files import prepared_root
from trainer.errors import ConfigError

SEQ_LEN = 16


def in_memory(docs, isolate: bool) -> PackedSequences:
    documents = [
        Document(torch.from_numpy(t.astype(np.int64)), None if m is None else torch.from_numpy(m))
        for t, m in docs
    ]
    return PackedSequences(TokenStream.of(documents, isolate_documents=isolate), SEQ_LEN)


def assert_same_batches(prepared: PreparedSequences, memory: PackedSequences) -> None:
    assert prepared.count == memory.count > 0
    for rows in torch.arange(memory.count).split(5):
        rows = rows.flip(0)  # any order
        got, want = prepared.batch(rows), memory.batch(rows)
        assert torch.equal(got.inputs, want.inputs)
        assert torch.equal(got.labels, want.labels)
        for field in ("positions", "documents"):
            a, b = getattr(got, field), getattr(want, field)
            assert (a is None and b is None) or torch.equal(a, b), field
        assert got.every_label == want.every_label


@pytest.mark.parametrize(
    ("docs", "isolate"),
    [
        (text_documents(40), False),
        (masked_documents(40), True),
        (masked_documents(40, seed=3), False),
        (text_documents(40, seed=5), True),
    ],
    ids=["text", "masked-isolated", "masked", "isolated"],
)
def test_local_shards_give_the_batches_of_the_same_tokens_in_memory(tmp_path: Path, docs, isolate):
    write_prepared(tmp_path, docs, docs_per_shard=3, isolate_documents=isolate)
    dataset = open_prepared(str(tmp_path), fingerprint="byte-v1", vocab_size=257, key="data.path")
    assert_same_batches(PreparedSequences(dataset, "train", SEQ_LEN), in_memory(docs, isolate))


def test_s3_byte_ranges_with_prefetch_give_the_same_batches(tmp_path: Path, s3_bucket, s3_direct):
    docs = masked_documents(30, seed=1)
    write_prepared(tmp_path, docs, docs_per_shard=4, isolate_documents=True)
    client, bucket = s3_direct.client(), s3_bucket
    for path in tmp_path.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), bucket, f"ds/{path.relative_to(tmp_path)}")
    root = prepared_root(f"s3://{bucket}/ds/manifest.json")
    assert root == f"s3://{bucket}/ds"
    dataset = open_prepared(root, fingerprint="byte-v1", vocab_size=257, key="data.path")
    prepared = PreparedSequences(dataset, "train", SEQ_LEN, workers=4, cache_windows=8)
    prepared.prefetch(torch.arange(0, prepared.count, 2))
    assert len(prepared._cache) == 8  # bounded: the oldest hints are dropped
    try:
        assert_same_batches(prepared, in_memory(docs, True))
    finally:
        prepared.close()


def test_a_window_spans_every_shard_it_touches(tmp_path: Path):
    docs = [(np.array([i, 256]), None) for i in range(20)]  # shards of 2 tokens
    write_prepared(tmp_path, docs, docs_per_shard=1)
    dataset = open_prepared(str(tmp_path), fingerprint="byte-v1", vocab_size=257, key="data.path")
    window = PreparedSequences(dataset, "train", 7).window(1)
    # tokens 7..14 of 0,256,1,256,...: the tail of shard 3, shards 4-6, the head of shard 7
    assert window.tokens.tolist() == [256, 4, 256, 5, 256, 6, 256, 7]


def test_a_manifest_of_another_tokenizer_or_a_larger_vocabulary_is_refused(tmp_path: Path):
    write_prepared(tmp_path / "a", text_documents(5), fingerprint="sha256:0123")
    with pytest.raises(ConfigError, match=r"^data.path: .*tokenizer 'sha256:0123'.*'byte-v1'"):
        open_prepared(str(tmp_path / "a"), fingerprint="byte-v1", vocab_size=257, key="data.path")
    write_prepared(tmp_path / "b", text_documents(5), vocab_size=70000)
    with pytest.raises(ConfigError, match=r"^data.mixture\[1\].path: .*70000.*model.vocab_size"):
        open_prepared(
            str(tmp_path / "b"), fingerprint="byte-v1", vocab_size=257, key="data.mixture[1].path"
        )
    with pytest.raises(ConfigError, match="no prepared-dataset manifest"):
        open_prepared(str(tmp_path), fingerprint="byte-v1", vocab_size=257, key="data.path")


def test_only_a_manifest_or_its_directory_is_a_prepared_dataset(tmp_path: Path):
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("{}\n")
    assert prepared_root(str(jsonl)) is None
    assert prepared_root("s3://b/corpus/train.jsonl") is None
    assert prepared_root(str(tmp_path)) == str(tmp_path)
    assert prepared_root(f"{tmp_path}/manifest.json") == str(tmp_path)
    assert prepared_root("s3://b/prepared/") == "s3://b/prepared"
