"""`trainer.profile.steps=[first, last]`: a torch.profiler trace of those optimizer steps from
every rank (and, on CUDA, an allocator memory snapshot), written into the run dir through the
run storage, so it lands on S3 as well as on a local disk.

  <run_dir>/profile/steps-<first>-<last>/rank<R>.trace.json     Chrome trace (Perfetto)
  <run_dir>/profile/steps-<first>-<last>/rank<R>.memory.pickle  CUDA only (memory_viz)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from trainer.storage import RunStorage

PROFILE_DIR = "profile"
_MEMORY_HISTORY_ENTRIES = 100_000


class StepProfiler:
    """Starts before step `first` runs and writes its files once step `last` is done
    (steps count from 1, as in metrics.jsonl). Does nothing without steps."""

    def __init__(self, steps: list[int], storage: RunStorage, *, rank: int, device: torch.device):
        self.first, self.last = (steps[0], steps[1]) if steps else (0, -1)
        self.storage, self.rank, self.device = storage, rank, device
        self._profile: profile | None = None

    @property
    def folder(self) -> str:
        return f"{PROFILE_DIR}/steps-{self.first}-{self.last}"

    def step_starts(self, step: int) -> None:
        if self._profile is not None or not self.first <= step <= self.last:
            return
        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
            torch.cuda.memory._record_memory_history(max_entries=_MEMORY_HISTORY_ENTRIES)
        self._profile = profile(activities=activities, record_shapes=True, profile_memory=True)
        self._profile.__enter__()

    def step_done(self, step: int) -> str | None:
        """The folder written when this step ends the profiled range, else None."""
        if self._profile is None or step < self.last:
            return None
        self._profile.__exit__(None, None, None)
        with tempfile.TemporaryDirectory(prefix="trainer_profile_") as tmp:
            trace = Path(tmp) / "trace.json"
            self._profile.export_chrome_trace(str(trace))
            self.storage.upload_file(trace, f"{self.folder}/rank{self.rank}.trace.json")
            if self.device.type == "cuda":
                snapshot = Path(tmp) / "memory.pickle"
                torch.cuda.memory._dump_snapshot(str(snapshot))
                torch.cuda.memory._record_memory_history(enabled=None)
                self.storage.upload_file(snapshot, f"{self.folder}/rank{self.rank}.memory.pickle")
        self._profile = None
        return self.storage.uri(self.folder)
