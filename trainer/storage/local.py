"""A run dir on the local filesystem; writes are atomic via temp file + rename."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from trainer.storage.base import (
    RangeRead,
    RunStorage,
    StorageError,
    StorageNotFoundError,
    clean_rel,
    refuse_root,
)

PARTIAL_SUFFIX = ".partial"
"""Temp files of in-flight writes end with this; `list_dir` hides them."""


@contextmanager
def local_errors(action: str, where: str | Path) -> Iterator[None]:
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError as exc:
        raise StorageNotFoundError(f"cannot {action} {where}: no such file") from exc
    except OSError as exc:
        raise StorageError(f"cannot {action} {where}: {exc.strerror or exc}") from exc


def _atomic_local_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write via `write(file)` into a temp sibling, fsync, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{PARTIAL_SUFFIX}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())  # the rename must not land before the data does
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _copy_from(source: Path) -> Callable[[BinaryIO], object]:
    def copy(fh: BinaryIO) -> None:
        with open(source, "rb") as src:
            shutil.copyfileobj(src, fh, length=8 * 1024 * 1024)

    return copy


class LocalStorage(RunStorage):
    """A run dir on a local or mounted filesystem (FSx for Lustre on the cluster)."""

    is_remote = False

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.root = os.fspath(run_dir).rstrip("/") or "/"
        self._root = Path(self.root)

    def local_path(self, rel: str = "") -> Path:
        rel = clean_rel(rel)
        return self._root / rel if rel else self._root

    def read_bytes(self, rel: str) -> bytes:
        path = self.local_path(rel)
        with local_errors("read", path):
            return path.read_bytes()

    def write_bytes(self, rel: str, data: bytes) -> None:
        path = self.local_path(rel)
        with local_errors("write", path):
            _atomic_local_write(path, lambda fh: fh.write(data))

    def read_range(
        self, rel: str, start: int, end: int | None = None, tag: str | None = None
    ) -> RangeRead:
        path = self.local_path(rel)
        with local_errors("read", path), open(path, "rb") as fh:
            stat = os.fstat(fh.fileno())
            version = f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
            if tag is not None and version == tag:
                return RangeRead(None, start, stat.st_size, version)
            size = stat.st_size
            begin = max(0, size + start) if start < 0 else min(start, size)
            stop = size if end is None else min(end, size)
            fh.seek(begin)
            return RangeRead(fh.read(max(0, stop - begin)), begin, size, version)

    def append_text(self, rel: str, text: str) -> None:
        path = self.local_path(rel)
        with local_errors("append to", path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)

    def exists(self, rel: str) -> bool:
        return self.local_path(rel).exists()

    def list_dir(self, rel: str) -> list[str]:
        path = self.local_path(rel)
        if not path.is_dir():
            return []
        with local_errors("list", path):
            return sorted(n for n in os.listdir(path) if not n.endswith(PARTIAL_SUFFIX))

    def file_sizes(self, rel: str) -> dict[str, int]:
        path = self.local_path(rel)
        if not path.is_dir():
            return {}
        with local_errors("list", path):
            return {
                f.relative_to(path).as_posix(): f.stat().st_size
                for f in path.rglob("*")
                if f.is_file() and not f.name.endswith(PARTIAL_SUFFIX)
            }

    def abort_uploads(self, rel: str) -> None:
        return None  # local writes are atomic renames: nothing is ever half-uploaded

    def _upload(self, pairs: list[tuple[Path, str]], target: str) -> None:
        for source, rel in pairs:
            dest = self.local_path(rel)
            with local_errors(f"copy {source} to", dest):
                if source.resolve() != dest.resolve():
                    _atomic_local_write(dest, _copy_from(source))

    def download_dir(self, rel: str, local_dir: Path) -> None:
        src = self.local_path(rel)
        if not src.is_dir():
            raise StorageNotFoundError(f"cannot download {src}: no such directory")
        with local_errors("download", src):
            if src.resolve() != Path(local_dir).resolve():
                shutil.copytree(src, local_dir, dirs_exist_ok=True)

    def delete_tree(self, rel: str) -> None:
        rel = clean_rel(rel)
        refuse_root(self, rel)
        path = self.local_path(rel)
        with local_errors("delete", path):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


def read_local_file(path: str) -> bytes:
    with local_errors("read", path):
        return Path(path).read_bytes()
