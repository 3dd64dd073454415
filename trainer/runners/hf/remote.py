"""runner=hf with an s3:// run dir: transformers.Trainer reads and writes checkpoints on local
disk, so complete ones are copied to `<run_dir>/checkpoints/checkpoint-N/` (the marker last)
and the newest complete one is fetched back when a pod starts (a relaunch, a recreated pod)."""

from __future__ import annotations

import os
from pathlib import Path

from contract.run_dir import CHECKPOINTS
from trainer.runners.hf.checkpoints import COMPLETE, complete_steps
from trainer.storage import open_run_storage


def fetch_newest(run_dir: str, output_dir: Path) -> int | None:
    """Download the newest complete checkpoint (once per node: LOCAL_RANK 0 calls this)."""
    steps = complete_steps(open_run_storage(run_dir), CHECKPOINTS)
    if not steps:
        return None
    name = f"checkpoint-{steps[-1]}"
    target = output_dir / name
    if not (target / COMPLETE).is_file():
        open_run_storage(run_dir).download_dir(f"{CHECKPOINTS}/{name}", target)
    return steps[-1]


def upload(run_dir: str, checkpoint: Path) -> None:
    """This node's files of `checkpoint` (every node's LOCAL_RANK 0), marker left out."""
    storage = open_run_storage(run_dir)
    rel = f"{CHECKPOINTS}/{checkpoint.name}"
    for path in sorted(checkpoint.rglob("*")):
        if path.is_file() and path.name != COMPLETE:
            storage.upload_file(path, f"{rel}/{path.relative_to(checkpoint)}")


def commit(run_dir: str, checkpoint: Path, keep: int) -> None:
    """After every node uploaded (a barrier): the marker, then older checkpoints beyond
    `keep` removed (global rank 0)."""
    storage = open_run_storage(run_dir)
    storage.write_text(f"{CHECKPOINTS}/{checkpoint.name}/{COMPLETE}", checkpoint.name + "\n")
    steps = complete_steps(storage, CHECKPOINTS)
    for step in steps[: max(0, len(steps) - keep)] if keep > 0 else []:
        storage.delete_tree(f"{CHECKPOINTS}/checkpoint-{step}")


def local_rank_zero() -> bool:
    return os.environ.get("LOCAL_RANK", "0") == "0"
