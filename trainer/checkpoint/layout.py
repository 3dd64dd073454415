"""What a checkpoint is on storage, and whether one is whole.

`<run_dir>/checkpoints/step-<8 digits>/` holds DCP's `.metadata` (which names every shard file
and the byte range of every entry in it), the shard files `__<rank>_<n>.distcp`, and last the
`COMMITTED` marker. Checking a step needs its metadata and one listing of the directory (on S3
one LIST request gives every object's size); the commit protocol, resume and
`trainstack checkpoints` all use the same check.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from contract.checkpoints import MARKER, METADATA, parse_step, step_dir
from contract.run_dir import CHECKPOINTS
from trainer.storage import RunStorage, StorageError


def read_metadata(storage: RunStorage, step: int):
    """DCP's Metadata of `step`; ValueError (or StorageError) when it does not read back."""
    from torch.distributed.checkpoint.metadata import (
        Metadata,
    )  # lazy: torch; jobs lists checkpoints without it

    try:
        metadata = pickle.loads(storage.read_bytes(f"{step_dir(step)}/{METADATA}"))
    except StorageError:
        raise
    except Exception as exc:  # a torn or foreign file: pickle raises anything
        raise ValueError(f"unreadable {METADATA} ({type(exc).__name__}: {exc})") from exc
    if not isinstance(metadata, Metadata):
        raise ValueError(f"unreadable {METADATA} (holds {type(metadata).__name__})")
    return metadata


def needed_sizes(metadata) -> dict[str, int]:
    """Each shard file the metadata names, and the size it must have at least (the end of the
    last entry it holds)."""
    sizes: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        end = info.offset + info.length
        sizes[info.relative_path] = max(sizes.get(info.relative_path, 0), end)
    return sizes


@dataclass
class CheckpointReport:
    """One step directory as found on storage."""

    step: int
    committed: bool
    size_bytes: int
    missing: list[str] = field(default_factory=list)
    """Shard files the metadata names that are not there."""
    short: list[str] = field(default_factory=list)
    """Shard files smaller than the metadata says (a torn write)."""
    metadata_error: str | None = None
    metadata: Any = field(default=None, repr=False)
    """DCP's Metadata of the step when it read back (a caller needing it reads it once)."""

    @property
    def complete(self) -> bool:
        return self.metadata_error is None and not self.missing and not self.short

    @property
    def problem(self) -> str | None:
        """Why this checkpoint cannot load, in a few words; None when its files are whole."""
        if self.metadata_error:
            return self.metadata_error
        parts = []
        if self.missing:
            parts.append(f"missing {', '.join(self.missing)}")
        if self.short:
            parts.append(f"short {', '.join(self.short)}")
        return "; ".join(parts) or None


def inspect_step(storage: RunStorage, step: int, files: dict[str, int] | None = None):
    """Check `step` against its metadata; `files` (name -> size) saves the listing when the
    caller already has it."""
    if files is None:
        files = storage.file_sizes(step_dir(step))
    report = CheckpointReport(step, MARKER in files, sum(files.values()))
    try:
        report.metadata = read_metadata(storage, step)
        needed = needed_sizes(report.metadata)
    except (StorageError, ValueError) as exc:
        report.metadata_error = str(exc) if METADATA in files else f"missing {METADATA}"
        return report
    for name, size in sorted(needed.items()):
        if name not in files:
            report.missing.append(name)
        elif files[name] < size:
            report.short.append(f"{name} ({files[name]} of {size} bytes)")
    return report


def step_files(storage: RunStorage) -> dict[int, dict[str, int]]:
    """step -> {file name: size} for every step directory, oldest first (one listing)."""
    by_step: dict[int, dict[str, int]] = {}
    for path, size in storage.file_sizes(CHECKPOINTS).items():
        name, _, rest = path.partition("/")
        step = parse_step(name)
        if step is not None and rest:
            by_step.setdefault(step, {})[rest] = size
    return dict(sorted(by_step.items()))


def committed_steps(storage: RunStorage) -> list[int]:
    """Steps whose marker exists, oldest first (one listing)."""
    return [step for step, files in step_files(storage).items() if MARKER in files]


def list_checkpoints(storage: RunStorage) -> list[CheckpointReport]:
    """Every step directory under `checkpoints/`, oldest first, each checked against its
    metadata (one listing, then one metadata read per step)."""
    return [inspect_step(storage, step, files) for step, files in step_files(storage).items()]
