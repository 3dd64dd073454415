"""Keeps the local files of someone else's program in step with an s3:// run dir, so a program
that knows nothing about S3 works on a cluster (trainer.runner_exec runs it under this):

- `MetricsCopy`: TRAINSTACK_METRICS, a file in the pod, copied to `logs/metrics.jsonl`;
- `CheckpointMirror`: TRAINSTACK_CHECKPOINT_DIR, a directory in the pod, restored from
  `checkpoints/` before the program starts; each sync uploads the files that changed since
  the last (a file that changed again while it was uploaded is uploaded again at the next), and
  a final one runs when the program exits (after SIGTERM too: the program saved, then
  exited). A program that writes a checkpoint to a temporary name and renames it (as
  torch.save users should anyway) never has half a file uploaded. A file the program deletes is
  deleted there too, so `keep`-style rotation carries over.

`run_syncing` runs the program as a child, forwarding SIGTERM/SIGINT, and syncs every
`TRAINSTACK_SYNC_INTERVAL_S` seconds (default 15) and at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from contract.run_dir import CHECKPOINTS, METRICS_FILE
from trainer.storage import RunStorage, open_run_storage

SYNC_INTERVAL_ENV = "TRAINSTACK_SYNC_INTERVAL_S"
SYNC_INTERVAL_S = 15.0


def _say(message: str) -> None:
    print(f"[trainer.runner_exec] {message}", file=sys.stderr, flush=True)


class Sync(Protocol):
    def sync(self, final: bool) -> None: ...


class MetricsCopy:
    def __init__(self, storage: RunStorage, metrics: Path):
        self.storage, self.metrics, self.size = storage, metrics, -1

    def sync(self, final: bool) -> None:
        try:
            size = self.metrics.stat().st_size
        except FileNotFoundError:
            return
        if size != self.size:
            try:
                self.storage.upload_file(self.metrics, METRICS_FILE)
                self.size = size
            except Exception as exc:  # progress is decoration; the next sync tries again
                _say(f"could not copy metrics to {self.storage.uri(METRICS_FILE)}: {exc}")


Signature = tuple[int, int]
"""(size, mtime_ns) of a local file."""


def _signature(path: Path) -> Signature | None:
    """None for anything but a file that exists now."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_size, stat.st_mtime_ns) if path.is_file() else None


class CheckpointMirror:
    def __init__(self, storage: RunStorage, local: Path):
        self.storage, self.local = storage, local
        self.synced: dict[str, Signature] = {}
        """What the run dir holds of each local file: as restored or last uploaded."""

    def _local_files(self) -> dict[str, Signature]:
        found = {}
        for path in self.local.rglob("*"):
            sig = _signature(path)
            if sig is not None:
                found[path.relative_to(self.local).as_posix()] = sig
        return found

    def restore(self) -> int:
        """The run dir's checkpoints/ into the local directory; how many files."""
        self.local.mkdir(parents=True, exist_ok=True)
        if not self.storage.file_sizes(CHECKPOINTS):
            return 0
        self.storage.download_dir(CHECKPOINTS, self.local)
        self.synced = self._local_files()
        return len(self.synced)

    def sync(self, final: bool) -> None:
        present = self._local_files()
        try:
            for rel, sig in sorted(present.items()):
                if self.synced.get(rel) == sig:
                    continue
                try:
                    self.storage.upload_file(self.local / rel, f"{CHECKPOINTS}/{rel}")
                except FileNotFoundError:  # renamed or deleted since listed: the next sync
                    continue
                if _signature(self.local / rel) == sig:  # not rewritten while uploaded
                    self.synced[rel] = sig
            for rel in sorted(set(self.synced) - set(present)):
                self.storage.delete_tree(f"{CHECKPOINTS}/{rel}")
                del self.synced[rel]
        except Exception as exc:  # the next sync (or the final one) tries again
            _say(f"could not sync checkpoints to {self.storage.uri(CHECKPOINTS)}: {exc}")
            if final:
                raise


def interval() -> float:
    try:
        return max(0.1, float(os.environ.get(SYNC_INTERVAL_ENV, SYNC_INTERVAL_S)))
    except ValueError:
        return SYNC_INTERVAL_S


def run_syncing(program: Sequence[str], syncs: Sequence[Sync]) -> int:
    """Run `program` as a child, forwarding SIGTERM/SIGINT; every sync runs every interval and
    once more, final, after the program exits. A final checkpoint upload that fails makes the
    exit code 1 (retryable) where the program succeeded: its last checkpoints are not stored."""
    proc = subprocess.Popen(list(program))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
    every = interval()
    while True:
        try:
            code = proc.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            for s in syncs:
                s.sync(final=False)
    code = 128 - code if code < 0 else code
    for s in syncs:
        try:
            s.sync(final=True)
        except Exception:
            code = code or 1
    return code


def syncs_for(run_dir: str, metrics: str, checkpoints: str, checkpoint_uri: str) -> list[Sync]:
    """What an s3:// run dir needs kept in step: the metrics file and the checkpoint directory
    when they are local paths here; [] for a local run dir (the program writes there)."""
    if "://" not in run_dir:
        return []
    storage = open_run_storage(run_dir)
    out: list[Sync] = []
    if metrics and "://" not in metrics:
        out.append(MetricsCopy(storage, Path(metrics)))
    if checkpoints and "://" not in checkpoints and "://" in checkpoint_uri:
        out.append(CheckpointMirror(storage, Path(checkpoints)))
    return out
