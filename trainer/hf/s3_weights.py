"""`model.init_from=s3://...`: each rank reads its own rows straight from S3 with ranged GETs.

Nothing is downloaded whole and nothing touches local disk. Per rank: the index (one GET),
then per safetensors file one ranged GET of its first `HEADER_PROBE` bytes, which holds the
8-byte length and, for any real checkpoint, the whole JSON header (a longer header costs one
more GET for the rest); then the rows this rank's FSDP2 shards own, each range read straight
into the shard (the CRT client splits large ranges into parallel part GETs), ranges that touch
merged into one GET. Reads go through the same CRT client, endpoint, retries and per-rank
User-Agent as the DCP checkpoint reader (`trainer.checkpoint.s3_io`).
"""

from __future__ import annotations

import json
import struct
from pathlib import PurePosixPath

from trainer.errors import ConfigError
from trainer.hf.weights import (
    INDEX_FILE,
    SINGLE_FILE,
    RowRead,
    TensorEntry,
    parse_header,
)
from trainer.storage import StorageError, StorageNotFoundError, open_run_storage
from trainer.storage.s3 import split_s3_uri

HEADER_PROBE = 64 * 1024
"""Bytes of a file's start read to find its header: Llama 3 70B's largest shard header is
~25 KB, so one GET almost always suffices; at most this much of tensor data is read twice."""


class S3Checkpoint:
    """A Hugging Face directory under s3://bucket/prefix, read by ranges."""

    def __init__(self, source: str) -> None:
        from trainer.checkpoint.s3_io import (
            s3_client,
        )  # lazy: s3torchconnector, for s3:// weights only

        self.source = source.rstrip("/")
        self._bucket, self._prefix = split_s3_uri(self.source)
        self._client = s3_client()
        self._readers: dict[str, object] = {}

    def weight_map(self) -> dict[str, str]:
        """tensor name -> file name, from the index or the single file's header."""
        storage = open_run_storage(self.source)
        try:
            raw = storage.read_bytes(INDEX_FILE)
        except StorageNotFoundError:
            return dict.fromkeys(self.header(SINGLE_FILE), SINGLE_FILE)
        except StorageError as exc:
            raise ConfigError(f"model.init_from: {exc}") from None
        try:
            return dict(json.loads(raw)["weight_map"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            problem = f"{self.source}/{INDEX_FILE} is not a safetensors index ({exc})"
            raise ConfigError(f"model.init_from: {problem}") from None

    def header(self, file_name: str) -> dict[str, TensorEntry]:
        """The file's tensors, from its header (checked against the object's size)."""
        reader = self._reader(file_name)
        where = f"{self.source}/{file_name}"
        try:
            size = reader.seek(0, 2)
            reader.seek(0)
            head = reader.read(min(size, HEADER_PROBE))
            if len(head) < 8:
                raise ValueError("shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", head[:8])
            if 8 + length > size:
                raise ValueError(f"its header length {length} runs past the end ({size} bytes)")
            if 8 + length > len(head):
                reader.seek(len(head))
                head += reader.read(8 + length - len(head))
            entries = parse_header(head[8 : 8 + length], 8 + length)
            _check_bounds(entries, size)
        except StorageError:
            raise
        except Exception as exc:  # CRT errors, bad JSON, missing keys: one line either way
            problem = " ".join(str(exc).split()) or type(exc).__name__
            raise ConfigError(
                f"model.init_from: {where} is not a readable safetensors file: {problem}"
            ) from None
        return entries

    def read_into(self, file_name: str, reads: list[RowRead]) -> None:
        """Fill each buffer from its offset of the file; touching ranges share one GET."""
        reader = self._reader(file_name)
        for start, group in _coalesce(reads):
            total = sum(len(buffer) for _, buffer in group)
            single = len(group) == 1
            target = group[0][1] if single else memoryview(bytearray(total))
            reader.seek(start)
            got = 0
            while got < total:  # readinto returns what one GET stream gave
                step = reader.readinto(target[got:])
                if not step:
                    break
                got += step
            if got != total:
                raise ConfigError(
                    f"model.init_from: {self.source}/{file_name} is truncated (short read)"
                )
            if not single:
                at = 0
                for _, buffer in group:
                    buffer[:] = target[at : at + len(buffer)]
                    at += len(buffer)

    def _reader(self, file_name: str):
        if file_name not in self._readers:
            from s3torchconnector import (
                S3ReaderConstructor,
            )  # lazy: s3torchconnector, for s3:// weights only

            key = str(PurePosixPath(self._prefix, file_name)) if self._prefix else file_name
            self._readers[file_name] = self._client.get_object(
                self._bucket, key, reader_constructor=S3ReaderConstructor.range_based(0)
            )
        return self._readers[file_name]


def _check_bounds(entries: dict[str, TensorEntry], size: int) -> None:
    for name, entry in entries.items():
        if entry.offset > size:
            raise ValueError(f"tensor {name!r} starts past the end of the file")


def _coalesce(reads: list[RowRead]) -> list[tuple[int, list[RowRead]]]:
    """Reads sorted by offset, those whose ranges touch grouped (each group one GET)."""
    groups: list[tuple[int, list[RowRead]]] = []
    end = -1
    for offset, buffer in sorted(reads, key=lambda r: r[0]):
        if groups and offset == end:
            groups[-1][1].append((offset, buffer))
        else:
            groups.append((offset, [(offset, buffer)]))
        end = offset + len(buffer)
    return groups
