"""`checkpoint-N` directories of transformers.Trainer, and which of them are complete.

Trainer writes a checkpoint's files one by one; a rank killed half-way leaves a directory that
looks like a checkpoint. `COMPLETE` is written into it by `CompleteMarker` after every rank
finished saving (a barrier), so resuming never starts from half a checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

COMPLETE = "trainstack-complete"
PATTERN = re.compile(r"^checkpoint-(\d+)$")


def complete_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """(step, dir) of every complete checkpoint, oldest first."""
    if not output_dir.is_dir():
        return []
    found = []
    for child in output_dir.iterdir():
        match = PATTERN.match(child.name)
        if match and (child / COMPLETE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def newest_complete(output_dir: Path) -> Path | None:
    done = complete_checkpoints(output_dir)
    return done[-1][1] if done else None
