"""`checkpoint-N` directories of transformers.Trainer, and which of them are complete.

Trainer writes a checkpoint's files one by one; a rank killed half-way leaves a directory that
looks like a checkpoint. `COMPLETE` is written into it by `CompleteMarker` after every rank
finished saving (a barrier), so resuming never starts from half a checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

from trainer.storage import RunStorage, open_run_storage

COMPLETE = "trainstack-complete"
PATTERN = re.compile(r"^checkpoint-(\d+)$")


def complete_steps(storage: RunStorage, under: str = "") -> list[int]:
    """Steps of the complete `checkpoint-N` directories in `under`, oldest first: the local
    output dir and an s3:// run dir's copies alike."""
    prefix, steps = f"{under}/" if under else "", []
    for name in storage.list_dir(under):
        match = PATTERN.match(name.rstrip("/"))
        if match and storage.exists(f"{prefix}{match.group(0)}/{COMPLETE}"):
            steps.append(int(match.group(1)))
    return sorted(steps)


def newest_complete(output_dir: Path) -> Path | None:
    steps = complete_steps(open_run_storage(str(output_dir)))
    return output_dir / f"checkpoint-{steps[-1]}" if steps else None
