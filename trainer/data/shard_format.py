"""The on-disk (or S3) form of a prepared dataset: token shards written once by
`trainstack data prepare`, read by every run without loading the corpus.

    <root>/manifest.json              written last: its presence is the commit
    <root>/<split>/<shard>.tokens     token ids back to back, little-endian `dtype` (uint16|uint32)
    <root>/<split>/<shard>.docs       little-endian uint64: offset of each document's first token
                                      within the shard (ascending, first is 0)
    <root>/<split>/<shard>.mask       only when `has_mask`: one bit per token, numpy
                                      `packbits(..., bitorder="little")`; 1 = a training target

`split` is `train` or `eval`. Each document ends with the tokenizer's end-of-text id, as
`Tokenizer.encode_document` frames it. A reader treats the shards of a split, in manifest order,
as one token stream; a writer never lists a shard in the manifest before the shard's files are
complete. This module is pure (no I/O): the writer and the reader bring their own.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.errors import ConfigError

FORMAT = "trainstack.tokens"
VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "eval")
DTYPES = {"uint16": 2, "uint32": 4}
"""Token dtype -> bytes per token."""


def token_dtype(vocab_size: int) -> str:
    """The narrowest dtype that holds every id of a vocabulary."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


@dataclass(frozen=True)
class Shard:
    split: str
    name: str
    """File stem, unique within its split (e.g. `00003-00012`: source 3, slice 12)."""
    tokens: int
    documents: int
    has_mask: bool = False

    def file(self, suffix: str) -> str:
        """Path relative to the dataset root: suffix is `tokens`, `docs` or `mask`."""
        return f"{self.split}/{self.name}.{suffix}"

    @property
    def files(self) -> list[str]:
        return [self.file(s) for s in ("tokens", "docs", *(("mask",) if self.has_mask else ()))]


@dataclass(frozen=True)
class Source:
    uri: str
    size: int
    version: str
    """S3 ETag, or the local file's mtime in ns: what tells an unchanged source apart."""


@dataclass
class Manifest:
    dtype: str
    vocab_size: int
    tokenizer_fingerprint: str
    data_format: str
    """`text`, `prompt_completion` or `chat` (data.format at prepare time)."""
    isolate_documents: bool
    """Documents may not attend to each other (instruction data), as TokenStream has it."""
    sources: list[Source]
    shards: list[Shard]
    malformed_lines: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    """The prepare settings that shape the output (field names, eval_fraction, ...): part of
    what makes a re-run a no-op."""
    format: str = FORMAT
    version: int = VERSION

    def split(self, name: str) -> list[Shard]:
        return [s for s in self.shards if s.split == name]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.shards)

    def to_json(self) -> str:
        body = asdict(self)
        body["tokens"], body["documents"] = self.tokens, self.documents
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = MANIFEST) -> Manifest:
        """Parse and check a manifest; anything off is one ConfigError naming `where`."""
        try:
            body = json.loads(text)
            if body.get("format") != FORMAT or body.get("version") != VERSION:
                raise ValueError(
                    f"format {body.get('format')!r} version {body.get('version')!r}; this trainer "
                    f"reads {FORMAT!r} version {VERSION}"
                )
            if body["dtype"] not in DTYPES:
                raise ValueError(f"dtype {body['dtype']!r}; allowed: {sorted(DTYPES)}")
            shards = [Shard(**s) for s in body["shards"]]
            if any(s.split not in SPLITS for s in shards):
                raise ValueError(f"a shard's split is not one of {SPLITS}")
            return cls(
                dtype=body["dtype"],
                vocab_size=int(body["vocab_size"]),
                tokenizer_fingerprint=body["tokenizer_fingerprint"],
                data_format=body["data_format"],
                isolate_documents=bool(body["isolate_documents"]),
                sources=[Source(**s) for s in body["sources"]],
                shards=shards,
                malformed_lines=int(body.get("malformed_lines", 0)),
                settings=dict(body.get("settings", {})),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"data.path: {where} is not a prepared-dataset manifest: {exc}"
            ) from None
