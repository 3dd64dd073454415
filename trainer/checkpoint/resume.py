"""Which checkpoint a run resumes from: the newest committed one that loads.

Committed checkpoints are tried newest first. Rank 0 first checks a candidate's files against
its metadata (missing or short shard, unreadable metadata: skipped without loading); then
every rank loads it and the outcome is gathered (one collective), so all ranks agree on
success or move on together (a shape mismatch or a read failure on any rank). A skipped
checkpoint gets one warning naming it and why. If committed checkpoints exist and none loads,
the run fails with `CheckpointError` — it never starts from step 0 over a run's history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

from contract.checkpoints import step_dir
from contract.run_dir import CHECKPOINTS
from trainer.checkpoint.checkpointer import (
    FAILED,
    Checkpointer,
    CheckpointError,
    Failures,
    describe,
    format_failures,
)
from trainer.checkpoint.layout import inspect_step
from trainer.errors import warn

T = TypeVar("T")


def resume_newest(checkpointer: Checkpointer, restore: Callable[[int], T]) -> tuple[int, T] | None:
    """(step, restore(step)) of the newest committed checkpoint that loads on every rank;
    None when there is no committed checkpoint at all. A collective."""
    env, storage = checkpointer.dist, checkpointer.storage
    group = env.checkpoint_group
    steps: list[list[int] | None] = [None]
    if env.is_main:
        steps[0] = sorted(checkpointer.committed_steps(), reverse=True)
    dist.broadcast_object_list(steps, src=0, group=group)
    skipped = []
    for step in steps[0] or []:
        problem: list[str | None] = [None]
        if env.is_main:
            problem[0] = inspect_step(storage, step).problem
        dist.broadcast_object_list(problem, src=0, group=group)
        if problem[0] is None:
            failures: Failures = {}
            try:
                result = restore(step)
            except FAILED as exc:
                failures = describe(exc)
            gathered: list[Failures | None] = [None] * env.world_size
            dist.all_gather_object(gathered, failures, group=group)
            merged = {rank: cause for f in gathered for rank, cause in (f or {}).items()}
            if not merged:
                checkpointer.last_committed = step
                return step, result
            problem[0] = f"does not load ({format_failures(merged)})"
        if env.is_main:
            warn(f"skipping {storage.uri(step_dir(step))}: {problem[0]}")
        skipped.append(f"step {step}: {problem[0]}")
    if skipped:
        raise CheckpointError(
            f"none of the {len(skipped)} committed checkpoints under "
            f"{storage.uri(CHECKPOINTS)} loads, so the run does not start over from step 0 "
            f"({'; '.join(skipped)})"
        )
    return None
