"""A run dir on the local filesystem; writes are atomic via temp file + rename.

Reads of a run dir never leave it and never block: a run's own code writes into a shared run
dir (FSx), so a path under the root may be a symlink (to /etc/passwd, another user's run) or a
FIFO (an open that waits forever). Reads walk the path from the root one directory at a time
without following a symlink, and open only regular files; anything else is a StorageError,
as an unreadable file is. The root itself may be a symlink (the operator's mount).

A model directory the user names (`model.init_from`, the Hugging Face cache, whose snapshot
files are symlinks into its blobs/) is read with `follow_links` (trainer.storage's
`open_model_storage`): its links are the user's to make, so they are followed, but only a
regular file is still read (a FIFO would block forever)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
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


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)  # a FIFO opens at once


class NotRegularError(StorageError):
    """A path under the run dir is a symlink, a FIFO, a device or a socket: never read."""


def _refuse(path: Path, what: str) -> NotRegularError:
    return NotRegularError(f"cannot read {path}: {what}; allowed: regular files and directories")


@contextmanager
def _walked(root: Path, rel: str) -> Iterator[int]:
    """A descriptor of the directory `rel` under `root`, opened one part at a time without
    following a symlink (ELOOP/ENOTDIR on one: refused)."""
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in [p for p in rel.split("/") if p]:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise _refuse(root / rel, f"{part!r} is a symlink or not a directory") from exc
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _regular_file(root: Path, rel: str) -> Iterator[BinaryIO]:
    """`rel` opened for reading: a regular file under `root` reached through no symlink."""
    parent, _, name = clean_rel(rel).rpartition("/")
    if not name:
        raise _refuse(root, "the run dir itself is no file")
    with _walked(root, parent) as dir_fd:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise _refuse(root / rel, "a symlink") from exc
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(root / rel, "not a regular file")
        os.set_blocking(fd, True)
        yield fh


@contextmanager
def _followed_file(path: Path) -> Iterator[BinaryIO]:
    """`path` opened for reading through any symlink, if it is a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refuse(path, "not a regular file")
        os.set_blocking(fd, True)
        yield fh


def _not_regular(directory: str, names: list[str]) -> set[str]:
    """copytree's `ignore`: the symlinks, FIFOs, devices and sockets of `directory`."""
    skipped = set()
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            skipped.add(name)
    return skipped


def _not_regular_followed(directory: str, names: list[str]) -> set[str]:
    """copytree's `ignore` through links: what is no regular file or directory once followed
    (a FIFO, a device, a socket, a dangling link)."""
    skipped = set()
    for name in names:
        try:
            mode = os.stat(os.path.join(directory, name)).st_mode
        except OSError:
            skipped.add(name)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            skipped.add(name)
    return skipped


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

    def __init__(self, run_dir: str | os.PathLike[str], follow_links: bool = False):
        self.root = os.fspath(run_dir).rstrip("/") or "/"
        self._root = Path(self.root)
        self.follow_links = follow_links
        """A model directory of the user's (the module docstring); False: a run dir."""

    def _open(self, rel: str):
        if self.follow_links:
            return _followed_file(self.local_path(rel))
        return _regular_file(self._root, rel)

    def local_path(self, rel: str = "") -> Path:
        rel = clean_rel(rel)
        return self._root / rel if rel else self._root

    def read_bytes(self, rel: str) -> bytes:
        path = self.local_path(rel)
        with local_errors("read", path), self._open(rel) as fh:
            return fh.read()

    def write_bytes(self, rel: str, data: bytes) -> None:
        path = self.local_path(rel)
        with local_errors("write", path):
            _atomic_local_write(path, lambda fh: fh.write(data))

    def read_range(
        self, rel: str, start: int, end: int | None = None, tag: str | None = None
    ) -> RangeRead:
        path = self.local_path(rel)
        with local_errors("read", path), self._open(rel) as fh:
            info = os.fstat(fh.fileno())
            version = f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"
            if tag is not None and version == tag:
                return RangeRead(None, start, info.st_size, version)
            size = info.st_size
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
        if self.follow_links:
            with local_errors("list", path):
                return sorted(n for n in os.listdir(path) if not n.endswith(PARTIAL_SUFFIX))
        with local_errors("list", path), _walked(self._root, clean_rel(rel)) as fd:
            return sorted(n for n in os.listdir(fd) if not n.endswith(PARTIAL_SUFFIX))

    def file_sizes(self, rel: str) -> dict[str, int]:
        path = self.local_path(rel)
        if not path.is_dir():
            return {}
        if self.follow_links:
            with local_errors("list", path):
                return {
                    f.relative_to(path).as_posix(): f.stat().st_size
                    for f in path.rglob("*")
                    if f.is_file() and not f.name.endswith(PARTIAL_SUFFIX)
                }
        sizes: dict[str, int] = {}
        with local_errors("list", path), _walked(self._root, clean_rel(rel)) as fd:
            for here, _, files, dir_fd in os.fwalk(".", dir_fd=fd):  # never into a symlink
                for name in files:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode) and not name.endswith(PARTIAL_SUFFIX):
                        sizes[os.path.normpath(os.path.join(here, name))] = info.st_size
        return sizes

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
            ignore = _not_regular_followed if self.follow_links else _not_regular
            if not self.follow_links:
                with _walked(self._root, clean_rel(rel)):
                    pass  # no part of `rel` is a symlink
            if src.resolve() != Path(local_dir).resolve():
                shutil.copytree(src, local_dir, dirs_exist_ok=True, ignore=ignore)

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
    """A file the user named (a data file, a program): a symlink is followed (it is theirs to
    name), but only a regular file is read (a FIFO would block forever)."""
    with local_errors("read", path), _followed_file(Path(path)) as fh:
        return fh.read()
