"""Saving sharded checkpoints with torch.distributed.checkpoint (DCP), and the commit protocol.

A step is committed only when every rank's write of it succeeded: after the writes (sync, or
when the async writes finished on every rank) each rank's outcome is gathered on rank 0 in one
collective; rank 0 then checks that every file the step's `.metadata` names is there at its
full size (one listing), writes the `COMMITTED` marker, and broadcasts the verdict. A failed
step is abandoned on every rank — no marker, its files and unfinished multipart uploads
removed, one line naming the step, the rank and the cause (also an event in metrics.jsonl) —
and training goes on. `trainer.checkpoint.max_consecutive_failures` failures in a row, or a
failed final (or SIGTERM) save, end the run with `CheckpointError`.

Local run dirs: DCP's FileSystemWriter into the step directory. S3 run dirs: streamed straight
to S3 from the staged CPU copy (`s3_io`). Resume and its fallback: `resume.py`.

Tests can stop a save between the shards and the marker: see `trainer.faults`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from contract.checkpoints import MARKER, step_dir
from contract.config import CheckpointConfig
from trainer.checkpoint.layout import inspect_step, read_metadata, step_files
from trainer.distributed import Distributed
from trainer.errors import warn
from trainer.faults import maybe_pause_before_commit
from trainer.storage import RunStorage, StorageError

Failures = dict[int, str]
"""rank -> cause, of one checkpoint attempt."""
FAILED = (Exception, CheckpointException)
"""What a failed save or load raises: DCP's CheckpointException is a BaseException."""


class CheckpointError(RuntimeError):
    """Checkpointing failed in a way the run cannot go on from; the message is one line."""


def describe(exc: BaseException) -> Failures:
    """rank -> one-line cause. DCP gathers every rank's failure into one CheckpointException;
    unpack it so the line names the rank that actually failed."""
    if isinstance(exc, CheckpointException):
        return {rank: _one_line(wrapped[0]) for rank, wrapped in exc.failures.items()}
    rank = dist.get_rank() if dist.is_initialized() else 0
    return {rank: _one_line(exc)}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text}"


def format_failures(failures: Failures) -> str:
    return "; ".join(f"rank {rank}: {cause}" for rank, cause in sorted(failures.items()))


class Checkpointer:
    """`report(record)` receives the metrics event of an abandoned checkpoint (rank 0)."""

    def __init__(
        self,
        storage: RunStorage,
        dist_env: Distributed,
        cfg: CheckpointConfig,
        report: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.storage, self.dist, self.cfg = storage, dist_env, cfg
        self._report = report
        self._pending: tuple[int, Future[Any], bool] | None = None
        self._consecutive_failures = 0
        self.last_committed: int | None = None
        """The newest step this run committed or resumed from."""
        # One stager for the whole run: it keeps its CPU copy of the state between saves, so
        # an async save after the first one only copies (no allocation) while the loop waits.
        self._stager = DefaultStager(StagingOptions(False, False, False, False))

    # ---- loading -------------------------------------------------------------------------

    def committed_steps(self) -> list[int]:
        """Committed steps, oldest first; uncommitted step directories get a warning."""
        steps = []
        for step, files in step_files(self.storage).items():
            if MARKER in files:
                steps.append(step)
            else:
                warn(f"skipping {self.storage.uri(step_dir(step))}: not committed")
        return steps

    def saved_keys(self, step: int) -> set[str]:
        return set(read_metadata(self.storage, step).state_dict_metadata)

    def load(self, step: int, state: dict[str, Any]) -> None:
        """Fill `state` (tensors in place, other values replaced) from checkpoint `step`."""
        rel = step_dir(step)
        group = self.dist.checkpoint_group
        local = self.storage.local_path(rel)
        if local is not None:
            dcp.load(state, checkpoint_id=str(local), process_group=group)
            return
        from trainer.checkpoint.s3_io import (
            s3_reader,
        )  # lazy: s3torchconnector, for s3:// run dirs only

        dcp.load(state, storage_reader=s3_reader(self.storage, rel), process_group=group)  # type: ignore[arg-type]

    # ---- saving --------------------------------------------------------------------------

    @property
    def pending_step(self) -> int | None:
        return self._pending[0] if self._pending else None

    def pending_done(self) -> bool:
        """This rank's part of the in-flight async save is finished (or there is none)."""
        return self._pending is None or self._pending[1].done()

    def save(self, step: int, state: dict[str, Any], *, asynchronous: bool, final: bool = False):
        """Write checkpoint `step` (a collective). Sync: returns whether it committed; async:
        returns None and `commit_pending` settles it later. `final`: a failure raises."""
        self.wait()  # never two saves in flight
        rel = step_dir(step)
        if self.dist.is_main:
            try:  # leftovers of a save that never committed (or an older run): start clean
                if self.storage.exists(rel):
                    self._delete(step)
            except StorageError as exc:
                warn(f"could not clear {self.storage.uri(rel)} before saving: {exc}")
        self.dist.barrier()
        group = self.dist.checkpoint_group
        target = self.storage.local_path(rel)
        if target is not None:
            target.mkdir(parents=True, exist_ok=True)
            where: dict[str, Any] = {"checkpoint_id": str(target)}
        else:
            from trainer.checkpoint.s3_io import (
                s3_writer,
            )  # lazy: s3torchconnector, for s3:// run dirs only

            where = {"storage_writer": s3_writer(self.storage, rel)}  # type: ignore[arg-type]
        if asynchronous:
            try:
                future = dcp.async_save(
                    state, process_group=group, async_stager=self._stager, **where
                )
            except FAILED as exc:  # staging failed: settle it like a failed write
                future = Future()
                future.set_exception(exc)
            self._pending = (step, future, final)  # type: ignore[assignment]
            return None
        failures: Failures = {}
        try:
            dcp.save(state, process_group=group, **where)
        except FAILED as exc:
            failures = describe(exc)
        return self._settle(step, failures, final=final)

    def commit_pending(self) -> None:
        """Settle the in-flight async save. Call only once EVERY rank's `pending_done()`."""
        if self._pending is None:
            return
        step, future, final = self._pending
        self._pending = None
        exc = future.exception()
        self._settle(step, describe(exc) if exc else {}, final=final)

    def wait(self) -> None:
        """Finish and settle the in-flight async save (a collective: all ranks call it)."""
        if self._pending is None:
            return
        self._pending[1].exception()  # waits; the outcome is settled below
        self.commit_pending()

    def close(self) -> None:
        self._stager.close()

    # ---- the commit protocol -------------------------------------------------------------

    def _settle(self, step: int, failures: Failures, *, final: bool) -> bool:
        """Agree on the outcome of `step` on every rank; commit it or abandon it."""
        group = self.dist.checkpoint_group
        gathered: list[Failures | None] = [None] * self.dist.world_size
        dist.all_gather_object(gathered, failures, group=group)
        verdict: list[Failures | None] = [None]
        if self.dist.is_main:
            merged = {rank: cause for f in gathered for rank, cause in (f or {}).items()}
            if not merged:
                merged = self._commit(step)
            if merged:
                self._abandon(step, merged)
            verdict[0] = merged
        dist.broadcast_object_list(verdict, src=0, group=group)
        failed = verdict[0] or {}
        if not failed:
            self._consecutive_failures = 0
            self.last_committed = step
            return True
        self._consecutive_failures += 1
        why = f"checkpoint step {step} failed: {format_failures(failed)}"
        if final:
            raise CheckpointError(f"the final {why}")
        limit = self.cfg.max_consecutive_failures
        if self._consecutive_failures >= limit:
            raise CheckpointError(
                f"{self._consecutive_failures} checkpoint saves failed in a row "
                f"(trainer.checkpoint.max_consecutive_failures={limit}); last: {why}"
            )
        return False

    def _commit(self, step: int) -> Failures:
        """Rank 0, every rank's write succeeded: check the files, write the marker."""
        try:
            report = inspect_step(self.storage, step)
            if not report.complete:
                return {0: f"files incomplete after every rank reported success: {report.problem}"}
            maybe_pause_before_commit(step)
            self.storage.write_text(f"{step_dir(step)}/{MARKER}", f"{step}\n")
        except StorageError as exc:
            return {0: _one_line(exc)}
        try:
            self._prune(newest=step)
        except StorageError as exc:  # the checkpoint is committed; old ones stay a while
            warn(f"pruning old checkpoints failed: {exc}")
        return {}

    def _abandon(self, step: int, failures: Failures) -> None:
        """Rank 0, after every rank finished: remove what the failed step left behind."""
        rel = step_dir(step)
        for rank, cause in sorted(failures.items()):
            if self._report is not None:
                event = "checkpoint_abandoned"
                self._report({"step": step, "event": event, "rank": rank, "cause": cause})
            else:
                warn(f"checkpoint step {step} abandoned: rank {rank}: {cause}")
        try:
            self.storage.abort_uploads(rel)
            self._delete(step)
        except StorageError as exc:  # never committed, so never loaded: a later save clears it
            warn(f"could not remove the abandoned {self.storage.uri(rel)}: {exc}")

    def _prune(self, newest: int) -> None:
        """Keep the newest `keep` committed checkpoints up to `newest` (which was just
        committed and checked whole: the newest loadable one); delete older ones and
        abandoned ones. Committed steps above `newest` (left by a run that resumed from an
        older one) are never counted as kept: they may be the ones that failed to load."""
        steps = step_files(self.storage)
        committed = [s for s, files in steps.items() if MARKER in files and s <= newest]
        keep = set(committed[-self.cfg.keep :]) | {newest}
        for step in steps:
            if step not in keep and step <= newest:
                self._delete(step)

    def _delete(self, step: int) -> None:
        # Marker first: a deletion cut short must not leave a half checkpoint looking committed.
        self.storage.delete_tree(f"{step_dir(step)}/{MARKER}")
        self.storage.delete_tree(step_dir(step))
