"""Output side of `data prepare`: shard files, per-slice commit markers and the manifest.

Shards are written straight to their final names (`train/00003-00012.tokens`, ...): nothing
reads a shard the manifest does not list, and the manifest is written last, so until it exists
the directory is not a dataset. Each slice of the sources, once all its shards landed, writes a
marker `_prepare/slice-<i>-of-<n>.json` (its shard list and counts); the final step checks every
marker and every listed file, writes `manifest.json` (the commit), then removes the markers and
any file no marker lists (left by a failed attempt).
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict

import numpy as np

from trainer.data.shard_format import MANIFEST, SPLITS, Manifest, Shard
from trainer.errors import ConfigError
from trainer.storage import RunStorage, S3Storage, StorageNotFoundError, open_run_storage

STAGING = "_prepare"
_LE = {"uint16": "<u2", "uint32": "<u4"}


class Output:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.storage: RunStorage = open_run_storage(uri)

    # -- the commit --------------------------------------------------------------------------
    def manifest(self) -> Manifest | None:
        """The committed manifest, or None when the output holds no finished dataset."""
        try:
            text = self.storage.read_text(MANIFEST)
        except StorageNotFoundError:
            return None
        return Manifest.from_json(text, where=self.storage.uri(MANIFEST))

    def commit(self, manifest: Manifest) -> None:
        listed = {f for shard in manifest.shards for f in shard.files}
        present = {
            f"{split}/{name}": size
            for split in SPLITS
            for name, size in self.storage.file_sizes(split).items()
        }
        missing = sorted(listed - present.keys())
        if missing:
            raise ConfigError(
                f"data prepare: {len(missing)} shard files listed by the slices are missing "
                f"under {self.uri} (first: {missing[0]}); nothing committed"
            )
        for stray in sorted(present.keys() - listed):
            self.storage.delete_tree(stray)  # a failed attempt's leftovers
        self.storage.write_bytes(MANIFEST, manifest.to_json().encode())
        self.storage.delete_tree(STAGING)

    # -- shards ------------------------------------------------------------------------------
    def put(self, rel: str, data: bytes) -> None:
        if isinstance(self.storage, S3Storage):
            # The transfer manager: multipart (in parallel parts) above its threshold.
            self.storage.client.upload_fileobj(
                io.BytesIO(data), self.storage.bucket, self.storage.key(rel)
            )
        else:
            self.storage.write_bytes(rel, data)

    def write_shard(
        self,
        shard: Shard,
        dtype: str,
        tokens: np.ndarray,
        lengths: np.ndarray,
        mask: np.ndarray | None,
    ) -> None:
        """A shard's files; the tokens file last (a reader never sees it without its docs)."""
        offsets = np.zeros(len(lengths), dtype="<u8")
        np.cumsum(lengths[:-1], out=offsets[1:])
        self.put(shard.file("docs"), offsets.tobytes())
        if shard.has_mask:
            assert mask is not None
            self.put(shard.file("mask"), np.packbits(mask, bitorder="little").tobytes())
        self.put(shard.file("tokens"), tokens.astype(_LE[dtype], copy=False).tobytes())

    # -- slice markers -----------------------------------------------------------------------
    @staticmethod
    def marker(index: int, slices: int) -> str:
        return f"{STAGING}/slice-{index:05d}-of-{slices:05d}.json"

    def write_marker(
        self, index: int, slices: int, plan: str, shards: list[Shard], malformed: int
    ) -> None:
        body = {"plan": plan, "shards": [asdict(s) for s in shards], "malformed_lines": malformed}
        self.storage.write_bytes(self.marker(index, slices), json.dumps(body).encode())

    def read_marker(self, index: int, slices: int) -> dict | None:
        try:
            return json.loads(self.storage.read_text(self.marker(index, slices)))
        except StorageNotFoundError:
            return None

    def discard(self, shards: list[Shard]) -> None:
        for shard in shards:
            for rel in shard.files:
                self.storage.delete_tree(rel)

    def refuse_foreign(self) -> None:
        """An output holding anything but a (half-written) dataset is not ours to clean."""
        foreign = sorted(set(self.storage.list_dir("")) - {STAGING, MANIFEST, *SPLITS})
        if foreign:
            raise ConfigError(
                f"data prepare: output {self.uri} holds other files (first: {foreign[0]!r}); "
                "choose a new or empty location for the dataset"
            )

    def clean_uncommitted(self) -> None:
        """Remove what an unfinished prepare left (only ever when no manifest exists)."""
        if self.storage.exists(MANIFEST):
            return
        self.refuse_foreign()
        for rel in (STAGING, *SPLITS):
            self.storage.delete_tree(rel)
        self.storage.abort_uploads("")
