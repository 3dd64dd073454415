"""The prepared-dataset manifest round-trips; anything else is refused in one line."""

from __future__ import annotations

import pytest

from trainer.data.shard_format import Manifest, Shard, Source, token_dtype
from trainer.errors import ConfigError
from trainer.tokenizer import ByteTokenizer


def _manifest() -> Manifest:
    return Manifest(
        dtype=token_dtype(ByteTokenizer.vocab_size),
        vocab_size=257,
        tokenizer_fingerprint=ByteTokenizer.fingerprint,
        data_format="text",
        isolate_documents=False,
        sources=[Source(uri="/data/a.jsonl", size=10, version="1")],
        shards=[Shard("train", "00000-00000", 100, 3), Shard("eval", "00000-00000", 7, 1, True)],
    )


def test_manifest_round_trips_and_counts():
    manifest = _manifest()
    again = Manifest.from_json(manifest.to_json())
    assert again == manifest
    assert (again.tokens, again.documents) == (107, 4)
    assert again.split("eval")[0].files == [
        "eval/00000-00000.tokens",
        "eval/00000-00000.docs",
        "eval/00000-00000.mask",
    ]


def test_dtype_is_the_narrowest_that_fits():
    assert token_dtype(65536) == "uint16"
    assert token_dtype(128256) == "uint32"


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace('"version": 1', '"version": 2'),
        lambda t: t.replace('"uint16"', '"int8"'),
        lambda t: t.replace('"split": "eval"', '"split": "test"'),
        lambda t: t.replace('"vocab_size"', '"vocab"'),
        lambda t: t[:20],
    ],
)
def test_not_a_manifest_is_one_config_error(edit):
    with pytest.raises(ConfigError, match=r"^data.path: m.json is not a prepared-dataset manifest"):
        Manifest.from_json(edit(_manifest().to_json()), where="m.json")


def test_fingerprint_changes_with_the_tokenizer_files(tmp_path):
    from testing_support.hf_models import write_tokenizer
    from trainer.tokenizer.hugging_face import HuggingFaceTokenizer

    small, large = tmp_path / "small", tmp_path / "large"
    for directory, size in ((small, 50), (large, 60)):
        directory.mkdir()
        write_tokenizer(directory, size)
    first = HuggingFaceTokenizer(str(small)).fingerprint
    assert first == HuggingFaceTokenizer(str(small)).fingerprint
    assert first != HuggingFaceTokenizer(str(large)).fingerprint
    assert first != HuggingFaceTokenizer(str(small), eos_token="<s>").fingerprint
    assert first != ByteTokenizer.fingerprint
