"""Input side of `data prepare`: which JSONL files a `data.path` names, and their lines.

`data.path` is a file, a directory (every JSONL file under it), a glob (`corpus/**/*.jsonl.gz`)
or an `s3://bucket/prefix` (every JSONL object under it; a glob in the key part filters them).
Files may be plain, gzip (`.gz`) or zstandard (`.zst`) compressed; both are decompressed as a
stream, so no file is ever held whole in memory.
"""

from __future__ import annotations

import fnmatch
import glob
import gzip
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import zstandard

from trainer.data.shard_format import Source
from trainer.errors import ConfigError
from trainer.storage import StorageError
from trainer.storage.s3 import S3_SCHEME, make_s3_client, s3_errors, split_s3_uri

SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
_GLOB_CHARS = set("*?[")


class CorruptInput(ConfigError):
    """A compressed source does not decompress (the message names it)."""


def is_jsonl(name: str) -> bool:
    return name.endswith(SUFFIXES)


def list_sources(path: str) -> list[Source]:
    """Every source `path` names, sorted by URI, with size and version (mtime ns / ETag)."""
    if not path:
        raise ConfigError("data.path: empty; give a JSONL file, directory, glob or s3:// prefix")
    found = _list_s3(path) if path.startswith(S3_SCHEME) else _list_local(path)
    if not found:
        raise ConfigError(
            f"data.path: {path!r} matches no JSONL file (allowed suffixes: {', '.join(SUFFIXES)})"
        )
    return sorted(found, key=lambda s: s.uri)


def _list_local(path: str) -> list[Source]:
    if "://" in path:
        raise ConfigError(f"data.path: {path!r}: only local paths and s3:// URIs are supported")
    if _GLOB_CHARS & set(path):
        files = [Path(p) for p in glob.glob(path, recursive=True)]
    elif Path(path).is_dir():
        files = [p for p in Path(path).rglob("*") if is_jsonl(p.name)]
    else:
        files = [Path(path)] if Path(path).is_file() else []
    out = []
    for file in files:
        if file.is_file() and (is_jsonl(file.name) or not (_GLOB_CHARS & set(path))):
            stat = file.stat()
            out.append(Source(str(file), stat.st_size, str(stat.st_mtime_ns)))
    return out


def _list_s3(path: str) -> list[Source]:
    bucket, key = split_s3_uri(path)
    cut = min((key.index(c) for c in _GLOB_CHARS if c in key), default=None)
    prefix = key if cut is None else key[:cut]
    pattern = None if cut is None else key
    client = make_s3_client()
    out = []
    try:
        with s3_errors("list", path):
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                for obj in page.get("Contents", []):
                    name = obj["Key"]
                    if pattern is not None and not fnmatch.fnmatchcase(name, pattern):
                        continue
                    if name == key or is_jsonl(name):
                        uri = f"{S3_SCHEME}{bucket}/{name}"
                        out.append(Source(uri, obj["Size"], obj["ETag"].strip('"')))
    except StorageError as exc:
        raise ConfigError(f"data.path: cannot list {path!r}: {exc}") from None
    return out


class _Counted(io.RawIOBase):
    """A file or botocore StreamingBody (read(n) only) as a raw stream `io.BufferedReader`
    can wrap, counting the (compressed) bytes read: what the progress bar shows."""

    def __init__(self, body: object) -> None:
        self._body = body
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._body.read(len(buffer))  # type: ignore[attr-defined]
        buffer[: len(data)] = data
        self.consumed += len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()  # type: ignore[attr-defined]
        super().close()


def _open_raw(source: Source) -> _Counted:
    if source.uri.startswith(S3_SCHEME):
        bucket, key = split_s3_uri(source.uri)
        try:
            with s3_errors("read", source.uri):
                body = make_s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        except StorageError as exc:
            raise ConfigError(f"data.path: {exc}") from None
        return _Counted(body)
    try:
        return _Counted(open(source.uri, "rb"))
    except OSError as exc:
        raise ConfigError(f"data.path: cannot read {source.uri!r}: {exc.strerror}") from None


def open_text_stream(source: Source) -> tuple[IO[bytes], _Counted]:
    """The decompressed bytes of a source as a buffered stream (close it when done), and the
    raw stream under it (how many stored bytes were read)."""
    raw = _open_raw(source)
    buffered = io.BufferedReader(raw, 1 << 20)
    name = source.uri.rsplit("/", 1)[-1]
    if name.endswith(".gz"):
        return io.BufferedReader(gzip.GzipFile(fileobj=buffered, mode="rb"), 1 << 20), raw  # type: ignore[arg-type]
    if name.endswith(".zst"):
        reader = zstandard.ZstdDecompressor().stream_reader(buffered, read_across_frames=True)
        return io.BufferedReader(reader, 1 << 20), raw  # type: ignore[arg-type]
    return buffered, raw


def read_chunks(source: Source, chunk_bytes: int) -> Iterator[tuple[list[bytes], int]]:
    """The lines of a source in chunks of about `chunk_bytes` (whole lines only), each with
    the stored bytes read so far."""
    try:
        stream, raw = open_text_stream(source)
        with stream, raw:
            while True:
                lines = stream.readlines(chunk_bytes)
                if not lines:
                    return
                yield lines, raw.consumed
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise ConfigError(f"data.path: {source.uri!r} vanished while reading") from None
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise CorruptInput(
            f"data.path: {source.uri!r} is corrupt or truncated ({detail}); fix or remove it"
        ) from None


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
