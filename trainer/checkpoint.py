"""Sharded checkpoints with torch.distributed.checkpoint (DCP), committed by a marker file.

`<run_dir>/checkpoints/step-<8 digits>/` counts only once its `COMMITTED` marker exists; rank 0
writes it last, after every rank finished its shards. A run resumes from the newest committed
checkpoint whose metadata reads back; others are skipped with a warning. DCP reshards on load,
so a checkpoint written by N ranks loads on M.

For a remote (s3://) run dir, DCP writes into a local staging directory, each rank uploads the
files it wrote, and only then is the marker written. Loading downloads the directory first.

Tests can stop a save between the shards and the marker: see `trainer.faults`.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from trainer.config import CheckpointConfig
from trainer.distributed import Distributed
from trainer.errors import warn
from trainer.faults import maybe_pause_before_commit
from trainer.storage import RunStorage, StorageError

CHECKPOINTS = "checkpoints"
MARKER = "COMMITTED"
METADATA = ".metadata"
STAGING_ENV = "TRAINSTACK_STAGING_DIR"


def step_dir(step: int) -> str:
    return f"{CHECKPOINTS}/step-{step:08d}"


def parse_step(name: str) -> int | None:
    digits = name.removeprefix("step-")
    return int(digits) if name.startswith("step-") and digits.isdigit() else None


class Checkpointer:
    def __init__(self, storage: RunStorage, dist_env: Distributed, cfg: CheckpointConfig):
        self.storage, self.dist, self.cfg = storage, dist_env, cfg
        self._pending: tuple[int, Future[Any]] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-upload")
        # One stager for the whole run: it keeps its CPU copy of the state between saves, so
        # an async save after the first one only copies (no allocation) while the loop waits.
        self._stager = DefaultStager(StagingOptions(False, False, False, False))
        self._staging: Path | None = None
        if storage.is_remote:
            base = os.environ.get(STAGING_ENV) or tempfile.gettempdir()
            name = storage.root.replace("://", "_").replace("/", "_")
            self._staging = Path(base) / "trainstack-staging" / name

    # ---- finding and loading -------------------------------------------------------------

    def find_latest(self) -> int | None:
        """Newest loadable committed step; rank 0 decides and tells the others."""
        choice: list[int | None] = [None]
        if self.dist.is_main:
            choice[0] = self._scan_latest()
        dist.broadcast_object_list(choice, src=0, group=self.dist.checkpoint_group)
        return choice[0]

    def _scan_latest(self) -> int | None:
        for step in sorted(self._steps(), reverse=True):
            rel = step_dir(step)
            if not self._is_committed(step):
                warn(f"skipping {self.storage.uri(rel)}: not committed (no {MARKER} marker)")
                continue
            try:
                metadata = pickle.loads(self.storage.read_bytes(f"{rel}/{METADATA}"))
                if not isinstance(metadata, Metadata):
                    raise TypeError(f"{METADATA} holds {type(metadata).__name__}")
            except Exception as exc:
                warn(f"skipping {self.storage.uri(rel)}: unreadable metadata ({exc})")
                continue
            return step
        return None

    def _steps(self) -> list[int]:
        try:
            names = self.storage.list_dir(CHECKPOINTS)
        except StorageError:
            return []
        return [s for s in map(parse_step, names) if s is not None]

    def saved_keys(self, step: int) -> set[str]:
        metadata = pickle.loads(self.storage.read_bytes(f"{step_dir(step)}/{METADATA}"))
        return set(metadata.state_dict_metadata)

    def load(self, step: int, state: dict[str, Any]) -> None:
        """Fill `state` (tensors in place, other values replaced) from checkpoint `step`."""
        rel = step_dir(step)
        group = self.dist.checkpoint_group
        local = self.storage.local_path(rel)
        if local is not None:
            dcp.load(state, checkpoint_id=str(local), process_group=group)
            return
        assert self._staging is not None
        cache = self._staging / f"load-rank{self.dist.rank}"
        shutil.rmtree(cache, ignore_errors=True)
        try:
            self.storage.download_dir(rel, cache / rel)
            dcp.load(state, checkpoint_id=str(cache / rel), process_group=group)
        finally:
            shutil.rmtree(cache, ignore_errors=True)  # a full copy of the checkpoint

    # ---- saving --------------------------------------------------------------------------

    @property
    def pending_step(self) -> int | None:
        return self._pending[0] if self._pending else None

    def pending_done(self) -> bool:
        """This rank's part of the in-flight async save is finished (or there is none)."""
        return self._pending is None or self._pending[1].done()

    def save(self, step: int, state: dict[str, Any], *, asynchronous: bool) -> None:
        self.wait()  # never two saves in flight
        rel = step_dir(step)
        if self.dist.is_main and step in self._steps():
            # Leftovers of a save that never committed (or an older run): start clean.
            self._delete(step)
        self.dist.barrier()
        target = self.storage.local_path(rel)
        if target is None:
            assert self._staging is not None
            target = self._staging / rel
            for stale in target.glob(f"__{self.dist.rank}_*"):  # left by a crashed attempt
                stale.unlink()
        target.mkdir(parents=True, exist_ok=True)
        group = self.dist.checkpoint_group
        if asynchronous:
            save_future = dcp.async_save(
                state, checkpoint_id=str(target), process_group=group, async_stager=self._stager
            )
            done = self._executor.submit(self._finish_writes, save_future, target, rel)
            self._pending = (step, done)
            return
        dcp.save(state, checkpoint_id=str(target), process_group=group)
        self._upload_own_files(target, rel)
        self.dist.barrier()
        self._commit(step)

    def commit_pending(self) -> None:
        """Commit the in-flight async save. Call only once EVERY rank's `pending_done()`."""
        if self._pending is None:
            return
        step, done = self._pending
        self._pending = None
        done.result()  # re-raises a failed write on this rank
        self._commit(step)

    def wait(self) -> None:
        """Finish and commit the in-flight async save (a collective: all ranks call it)."""
        if self._pending is None:
            return
        self._pending[1].result()
        self.dist.barrier()
        self.commit_pending()

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._stager.close()

    def _finish_writes(self, save_future: Future[Any], target: Path, rel: str) -> None:
        save_future.result()
        self._upload_own_files(target, rel)

    def _upload_own_files(self, target: Path, rel: str) -> None:
        if not self.storage.is_remote:
            return
        mine = sorted(target.glob(f"__{self.dist.rank}_*"))
        if self.dist.is_main:
            mine.append(target / METADATA)
        for file in mine:
            self.storage.upload_file(file, f"{rel}/{file.name}")
            file.unlink()

    def _commit(self, step: int) -> None:
        if not self.dist.is_main:
            return
        maybe_pause_before_commit(step)
        self.storage.write_text(f"{step_dir(step)}/{MARKER}", f"{step}\n")
        self._prune(newest=step)

    def _prune(self, newest: int) -> None:
        """Keep the newest `keep` committed checkpoints; drop older and abandoned ones."""
        steps = sorted(self._steps())  # one listing: on S3 each is a request
        committed = [s for s in steps if self._is_committed(s)]
        keep = set(committed[-self.cfg.keep :])
        for step in steps:
            if step not in keep and step <= newest:
                self._delete(step)

    def _delete(self, step: int) -> None:
        # Marker first: a deletion cut short must not leave a half checkpoint looking committed.
        self.storage.delete_tree(f"{step_dir(step)}/{MARKER}")
        self.storage.delete_tree(step_dir(step))

    def _is_committed(self, step: int) -> bool:
        return self.storage.exists(f"{step_dir(step)}/{MARKER}")
