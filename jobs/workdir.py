"""`runner.workdir=DIR`: the directory shipped with a job instead of an image build.

Packed reproducibly (sorted paths, zeroed times and owners, normalized modes, gzip without a
timestamp), so the same files always give the same sha256; the files are git's tracked ones
when DIR is in a git checkout, else everything under DIR minus `IGNORED`, the patterns of
DIR/.trainstackignore and the directories runs are kept in (the storage root, the local state
root: `excluded`), so runs never pack their own checkpoints and earlier archives and a
relaunch with the same files gets the same hash. Packed once per process and directory
(`pack`): every point of a sweep ships the same archive, even if files change while it runs.
Stored once per run dir as `code/<sha256>.tar.gz` (`store`); `trainer.runner_exec` unpacks
and verifies it. A relaunch whose pack differs from its run's is refused, naming the files
(`check_unchanged`).
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import subprocess
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

from jobs.errors import BackendError, JobConfigError
from trainer.storage import open_run_storage, read_uri_bytes

IGNORED = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    "__pycache__",
    "*.pyc",
    ".cache",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    "*.egg-info",
    ".ipynb_checkpoints",
    "node_modules",
    "wandb",
    ".DS_Store",
)
"""Left out of a directory that is not a git checkout (any path component matching)."""
IGNORE_FILE = ".trainstackignore"
"""One fnmatch pattern per line (matched against each path component and the relative path)."""
KEY = "runner.workdir"


@dataclass(frozen=True)
class PackedWorkdir:
    sha256: str
    data: bytes
    """The .tar.gz itself."""
    files: int
    source: str
    """`git` or `directory`."""


def _git_files(root: Path) -> list[str] | None:
    """Tracked files under `root` (relative), or None when it is not in a git work tree."""
    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--", "."],
            capture_output=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = [n for n in listed.stdout.decode().split("\0") if n]
    # Tracked but deleted here: nothing to ship. Submodules list as directories: skipped.
    return [n for n in names if (root / n).is_file()]


def _ignore_patterns(root: Path) -> tuple[str, ...]:
    path = root / IGNORE_FILE
    extra = []
    if path.is_file():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                extra.append(line.rstrip("/"))
    return (*IGNORED, *extra)


def _ignored(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.split("/")
    return any(
        fnmatch.fnmatch(rel, p) or any(fnmatch.fnmatch(part, p) for part in parts) for p in patterns
    )


def _walk_files(root: Path, excluded: frozenset[Path] = frozenset()) -> list[str]:
    patterns = _ignore_patterns(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        dirnames[:] = [
            d
            for d in dirnames
            if not _ignored(f"{rel_dir}/{d}".lstrip("/"), patterns)
            and Path(dirpath, d).resolve() not in excluded
        ]
        for name in filenames:
            rel = f"{rel_dir}/{name}".lstrip("/")
            if not _ignored(rel, patterns) and (root / rel).is_file():
                found.append(rel)
    return found


def list_files(root: Path, excluded: frozenset[Path] = frozenset()) -> tuple[list[str], str]:
    """(relative paths, sorted; `git` or `directory`); nothing under an `excluded` directory
    (absolute, resolved) in either case."""
    tracked = _git_files(root)
    if tracked is not None:
        names, source = tracked, "git"
    else:
        names, source = _walk_files(root, excluded), "directory"
    inside = [d.relative_to(root).as_posix() for d in excluded if d.is_relative_to(root)]
    names = [n for n in names if not any(n == d or n.startswith(f"{d}/") for d in inside)]
    return sorted(names), source


def _biggest(root: Path, names: list[str], count: int = 3) -> str:
    sizes = sorted(((root / n).stat().st_size, n) for n in names)[-count:]
    return ", ".join(f"{n} ({s / 2**20:.1f} MiB)" for s, n in reversed(sizes))


def archive(root: Path, names: list[str]) -> bytes:
    """The reproducible .tar.gz of `names` under `root`."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in names:
            path = root / name
            info = tarfile.TarInfo(name)
            stat = path.stat()
            info.size = stat.st_size
            info.mode = 0o755 if stat.st_mode & 0o111 else 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    return buffer.getvalue()


def digests(data: bytes) -> dict[str, str]:
    """name -> sha256 of each file in a packed archive."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            f = tar.extractfile(member)
            if f is not None:
                out[member.name] = hashlib.sha256(f.read()).hexdigest()
    return out


def changed_files(before: bytes, after: bytes) -> list[tuple[str, str]]:
    """(name, `new`, `removed` or `changed`) of each file that differs between two archives,
    by name."""
    old, new = digests(before), digests(after)
    return [
        (name, "new" if name not in old else "removed" if name not in new else "changed")
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    ]


def changes(found: list[tuple[str, str]], limit: int = 5) -> str:
    """`a.py (changed), b.py (new), c.py (removed)`; `limit` named."""
    if not found:
        return "the same files, packed differently (modes)"
    named = ", ".join(f"{name} ({how})" for name, how in found[:limit])
    return named + (f" and {len(found) - limit} more" if len(found) > limit else "")


CODE_SUFFIXES = (".py", ".pyi", ".sh", ".toml", ".cfg", ".yaml", ".yml")
"""Files that are the program's own: never offered as a pattern to leave out."""


def ignore_hint(workdir: str, found: list[tuple[str, str]]) -> str:
    """How files a run or a tool writes into a plain directory (a log, outputs) stay out of
    its code: the ignore file, with a pattern that keeps the first such file out (a new one
    first: `trainstack launch ... > train.log` makes one); empty when every file is code."""
    written = [n for n, how in found if how != "removed" and not n.endswith(CODE_SUFFIXES)]
    new = {n for n, how in found if how == "new"}
    if not written:
        return ""
    name = sorted(written, key=lambda n: n not in new)[0]
    top, _, below = name.partition("/")
    suffix = Path(name).suffix
    pattern = top if below else f"*{suffix}" if suffix else name
    where = os.path.join(workdir, IGNORE_FILE)
    return (
        f"; files a run or a tool writes there (logs, outputs) belong in {where}, one pattern "
        f"a line: `{pattern}` keeps {name} out of the code of the runs launched after it"
    )


def check_unchanged(run_id: str, workdir: str, recorded: str, uri: str, code: PackedWorkdir):
    """A relaunch runs the code its run was launched with: a different pack of the workdir is
    refused in one line naming the files that changed (read from the stored archive) and, for
    a plain directory, the ignore file that keeps what runs write there out of the code."""
    if code.sha256 == recorded:
        return
    hint = ""
    try:
        found = changed_files(read_uri_bytes(uri), code.data)
        what = changes(found)
        if code.source == "directory":
            hint = ignore_hint(workdir, found)
    except Exception as exc:  # the stored archive is gone or unreadable: say so, and the hashes
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        what = f"unknown files (the launched archive {uri} cannot be read: {reason})"
    raise JobConfigError(
        KEY,
        f"{workdir!r} changed since run {run_id} was launched with code {recorded[:12]} (now "
        f"{code.sha256[:12]}): {what}; a relaunch runs the same code: restore the files, or "
        f"use a new run_id{hint}",
    )


_packed: dict[tuple[str, int, frozenset[Path]], PackedWorkdir] = {}
_lock = threading.Lock()


def pack(workdir: str, max_mb: int, excluded: tuple[str, ...] = ()) -> PackedWorkdir:
    """Pack `workdir` (once per process); raises JobConfigError (one line) when it is missing,
    empty or bigger than `max_mb` MiB packed. Nothing under the `excluded` local directories
    (where runs are kept) is packed."""
    if not workdir or not workdir.strip():
        raise JobConfigError(KEY, "is empty; allowed: a local directory, e.g. runner.workdir=.")
    if "://" in workdir:
        raise JobConfigError(KEY, f"{workdir!r} is a URI; allowed: a local directory")
    root = Path(workdir).expanduser().resolve()
    if not root.is_dir():
        raise JobConfigError(
            KEY, f"no such directory {workdir!r} (relative to {Path.cwd()}); allowed: a directory"
        )
    skip = frozenset(Path(d).expanduser().resolve() for d in excluded if "://" not in d)
    with _lock:
        cached = _packed.get((str(root), max_mb, skip))
        if cached is not None:
            return cached
        names, source = list_files(root, skip)
        if not names:
            what = "no git-tracked files" if source == "git" else "no files (after ignores)"
            raise JobConfigError(KEY, f"{workdir!r} has {what}; allowed: a directory with code")
        raw = sum((root / n).stat().st_size for n in names)
        cap = max_mb * 2**20
        # Compression only helps so much: a tree far past the cap is refused without packing.
        data = archive(root, names) if raw <= cap * 20 else None
        if data is None or len(data) > cap:
            raise JobConfigError(
                KEY,
                f"{workdir!r} packs to more than runner.workdir_max_mb={max_mb} MiB "
                f"({len(names)} files, {raw / 2**20:.1f} MiB unpacked); biggest: "
                f"{_biggest(root, names)}; allowed: add them to {IGNORE_FILE} (or untrack "
                "them), ship data through S3, or raise runner.workdir_max_mb",
            )
        packed = PackedWorkdir(hashlib.sha256(data).hexdigest(), data, len(names), source)
        _packed[(str(root), max_mb, skip)] = packed
        return packed


def store(run_dir: str, uri: str, data: bytes) -> None:
    """Write the archive to its place under the run dir once (local path or s3://); a
    relaunch or restart finds it there and writes nothing."""
    rel = uri[len(run_dir.rstrip("/")) + 1 :]
    try:
        storage = open_run_storage(run_dir)
        if not storage.exists(rel):
            storage.write_bytes(rel, data)
    except Exception as exc:  # one line at the boundary; nothing was submitted yet
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BackendError(f"runner.workdir: cannot store the code at {uri}: {reason}") from exc
