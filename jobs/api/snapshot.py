"""One shared view of the cluster's runs: however many clients poll, the API server sees about
one LIST of each job kind (TrainJobs, PyTorchJobs) per `ttl_s`.

Reads never wait for the cluster once a snapshot exists: the first read after it went stale
starts one refresh in the background (one LIST, plus each run's progress from its run dir)
and is answered from the snapshot at hand, at most about two ttls old. Only the very first
read, and reads after a failed LIST, refresh in line (one at a time; the others wait for it
and share its result), and a failed LIST is remembered for a ttl, so an unreachable cluster
is not hammered. Writes update their one run with a GET (`refresh_run`), not a LIST, so a
client sees its own submission at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from catalog import get_instance_type
from jobs.api.models import Run
from jobs.backends.base import BackendError, RunStatus
from jobs.backends.kubernetes.run_status import instance_type_of, to_status
from jobs.plot.metrics import max_steps, read_config

CONFIG_RETRY_S = 30.0
"""How often a run dir without config.yaml yet (a pending run) is looked at again."""


@dataclass(frozen=True)
class RunView:
    status: RunStatus
    instance_type: str | None
    hourly_usd: float | None
    max_steps: int | None

    def cost_so_far(self, now: datetime) -> float | None:
        started = _parse(self.status.started_at)
        if self.hourly_usd is None or started is None:
            return None
        end = _parse(self.status.finished_at) or now
        return round(self.hourly_usd * max(0.0, (end - started).total_seconds()) / 3600, 2)


def _parse(stamp: str | None) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def hourly_usd(instance_type: str | None, nodes: int) -> float | None:
    try:
        return get_instance_type(instance_type).hourly_usd * nodes if instance_type else None
    except (KeyError, ValueError):
        return None


class RunsSnapshot:
    def __init__(self, list_jobs: Callable[[], list[dict]], ttl_s: float = 1.0):
        self.list_jobs = list_jobs
        self.ttl_s = ttl_s
        self.lists = 0
        """LISTs made so far (the load test reads it)."""
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._runs: dict[str, RunView] = {}
        self._error: BackendError | None = None
        self._max_steps: dict[str, int] = {}
        """run dir -> trainer.max_steps: a run's config does not change once written."""
        self._config_tried: dict[str, float] = {}
        """run dir -> when its config.yaml was last looked for and not there yet."""

    def invalidate(self) -> None:
        """The next read refreshes in line (tests; a changed cluster)."""
        self._at = -float("inf")

    def must_wait(self) -> bool:
        """Whether `runs()` would refresh in line (so async callers run it in a thread)."""
        age = time.monotonic() - self._at
        return age == float("inf") or (self._error is not None and age > self.ttl_s)

    def runs(self) -> dict[str, RunView]:
        """run id -> view, oldest first; raises BackendError when the cluster cannot be read."""
        age = time.monotonic() - self._at
        if self.must_wait():
            with self._lock:
                if time.monotonic() - self._at > self.ttl_s:  # nobody refreshed while we waited
                    self._refresh()
        elif age > self.ttl_s and self._lock.acquire(blocking=False):
            threading.Thread(target=self._refresh_and_release, daemon=True).start()
        if self._error is not None:
            raise self._error
        return self._runs

    def get(self, run_id: str) -> RunView | None:
        return self.runs().get(run_id)

    def refresh_run(self, run_id: str, get_job: Callable[[str], dict | None]) -> None:
        """After a write: re-read that one run (a GET) into the snapshot."""
        job = get_job(run_id)
        runs = dict(self._runs)
        if job is None:
            runs.pop(run_id, None)
        else:
            runs[run_id] = self._view(to_status(job), job)
        self._runs = runs  # replaced whole: readers never see a dict being changed

    def _refresh_and_release(self) -> None:
        try:
            self._refresh()
        finally:
            self._lock.release()

    def _refresh(self) -> None:
        self.lists += 1
        try:
            jobs = self.list_jobs()
        except BackendError as err:
            self._error, self._at = err, time.monotonic()
            return
        views = [self._view(to_status(job), job) for job in jobs]
        views.sort(key=lambda v: v.status.started_at or "")
        self._runs = {v.status.run_id: v for v in views}
        self._error, self._at = None, time.monotonic()

    def _view(self, status: RunStatus, job: dict[str, Any]) -> RunView:
        instance = instance_type_of(job)
        run_dir = status.run_dir
        now = time.monotonic()
        due = now - self._config_tried.get(run_dir or "", -float("inf")) > CONFIG_RETRY_S
        if run_dir and run_dir not in self._max_steps and due:
            # config.yaml is the run's own file: read_config bounds it and never raises.
            steps = max_steps(read_config(run_dir))
            if steps is None:
                self._config_tried[run_dir] = now
            else:
                self._max_steps[run_dir] = steps
        return RunView(
            status=status,
            instance_type=instance,
            hourly_usd=hourly_usd(instance, status.nodes),
            max_steps=self._max_steps.get(run_dir or ""),
        )


def to_run(view: RunView, now: datetime) -> Run:
    s = view.status
    progress = None
    if view.max_steps and s.last_step is not None:
        progress = round(min(1.0, s.last_step / view.max_steps), 4)
    return Run(
        run_id=s.run_id,
        state=s.state,
        sweep_id=s.sweep_id,
        nodes=s.nodes,
        retries=s.retries,
        started_at=s.started_at,
        finished_at=s.finished_at,
        last_step=s.last_step,
        last_loss=s.last_loss,
        max_steps=view.max_steps,
        progress=progress,
        instance_type=view.instance_type,
        hourly_usd=view.hourly_usd,
        cost_so_far_usd=view.cost_so_far(now),
        run_dir=s.run_dir,
        message=s.message,
        owner=s.owner,
    )
