"""The run-dir storage interface and its errors, shared by the local and S3 backends."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path


class StorageError(RuntimeError):
    """A run-dir or data read/write failed; the message is one line naming the URI."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """The object or directory does not exist (also catchable as FileNotFoundError)."""


def clean_rel(rel: str | os.PathLike[str]) -> str:
    """Normalise a run-dir-relative path; refuse absolute paths and '..' (no escaping)."""
    text = os.fspath(rel)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if text.startswith("/") or ".." in parts or "\\" in text:
        raise StorageError(
            f"path {text!r} must be relative to the run dir, '/'-separated, without '..'"
        )
    return "/".join(parts)


@dataclass(frozen=True)
class RangeRead:
    """Part of a file: `data` from byte `begin` (None: unchanged since `tag`), the file's
    `size` (None when the store did not say) and `tag`, its version (an S3 ETag)."""

    data: bytes | None
    begin: int
    size: int | None
    tag: str | None


class RunStorage(ABC):
    """A run dir: `root` is the run_dir string; paths passed in are relative to it."""

    root: str
    is_remote: bool

    def uri(self, rel: str = "") -> str:
        """The full path or s3:// URI of `rel`, for messages and logs."""
        rel = clean_rel(rel)
        return f"{self.root}/{rel}" if rel else self.root

    def local_path(self, rel: str = "") -> Path | None:
        """The local filesystem path of `rel`, or None when the run dir is remote."""
        return None

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes: ...

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def read_range(
        self, rel: str, start: int, end: int | None = None, tag: str | None = None
    ) -> RangeRead:
        """Bytes `start` (negative: that many from the end) up to `end` (exclusive; None: the
        end of the file); `data` is None when the file's version is still `tag`. Readers of
        a growing file (metrics.jsonl) read only what was appended."""
        data = self.read_bytes(rel)
        begin = max(0, len(data) + start) if start < 0 else min(start, len(data))
        return RangeRead(data[begin:end], begin, len(data), None)

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Atomic: readers see the old content or the new, never a partial file."""

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    @abstractmethod
    def append_text(self, rel: str, text: str) -> None:
        """Append to a small log file (metrics.jsonl); single writer (rank 0) assumed."""

    @abstractmethod
    def exists(self, rel: str) -> bool:
        """True for an existing file or a non-empty directory."""

    @abstractmethod
    def list_dir(self, rel: str) -> list[str]:
        """Immediate child names (files and directories), sorted; [] when missing."""

    def upload_file(self, local_file: Path, rel: str) -> None:
        """Copy one local file to `rel` (atomically, like `write_bytes`)."""
        self._upload([(Path(local_file), clean_rel(rel))], self.uri(rel))

    def upload_dir(self, local_dir: Path, rel: str) -> None:
        """Copy every file under `local_dir` to `rel/...`; returns only when all landed."""
        local_dir, rel = Path(local_dir), clean_rel(rel)
        if not local_dir.is_dir():
            raise StorageError(f"cannot upload {local_dir} to {self.uri(rel)}: not a directory")
        files = sorted(p for p in local_dir.rglob("*") if p.is_file())
        pairs = [(p, clean_rel(f"{rel}/{p.relative_to(local_dir).as_posix()}")) for p in files]
        self._upload(pairs, self.uri(rel))

    @abstractmethod
    def _upload(self, pairs: list[tuple[Path, str]], target: str) -> None:
        """Copy each (local file, rel) pair; `target` names the destination in errors."""

    @abstractmethod
    def download_dir(self, rel: str, local_dir: Path) -> None:
        """Copy every file under `rel/` into `local_dir`, keeping the relative layout."""

    @abstractmethod
    def file_sizes(self, rel: str) -> dict[str, int]:
        """Size in bytes of every file under `rel/`, keyed by its path relative to `rel`
        ('/'-separated); {} when there is nothing. On S3 this is one listing."""

    @abstractmethod
    def abort_uploads(self, rel: str) -> None:
        """Abort unfinished multipart uploads under `rel/` (S3; nothing to do locally)."""

    @abstractmethod
    def delete_tree(self, rel: str) -> None:
        """Delete `rel` and everything under it; missing is fine. The root itself is refused."""


def refuse_root(storage: RunStorage, rel: str) -> None:
    if not rel:
        raise StorageError(f"refusing to delete the whole run dir {storage.root}")
