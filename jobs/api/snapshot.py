"""One shared view of the cluster's runs: however many clients poll, the API server sees about
one LIST of PyTorchJobs per `ttl_s`.

The first request after the snapshot went stale refreshes it (one LIST, plus each run's
progress from its run dir); requests arriving meanwhile wait for that refresh instead of
starting their own. A failed LIST is remembered for the same ttl, so an unreachable cluster
is not hammered either. Writes (submit, cancel) invalidate the snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobs.backends.base import BackendError, RunStatus
from jobs.plot.metrics import max_steps, read_config


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


def instance_type_of(job: dict) -> str | None:
    from jobs.manifests import INSTANCE_TYPE_LABEL

    for replica in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).values():
        pod = (replica.get("template") or {}).get("spec") or {}
        found = (pod.get("nodeSelector") or {}).get(INSTANCE_TYPE_LABEL)
        if found:
            return found
    return None


def hourly_usd(instance_type: str | None, nodes: int) -> float | None:
    from catalog import get_instance_type

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

    def invalidate(self) -> None:
        with self._lock:
            self._at = -float("inf")

    def runs(self) -> dict[str, RunView]:
        """run id -> view, oldest first; raises BackendError when the cluster cannot be read."""
        if time.monotonic() - self._at > self.ttl_s:
            with self._lock:
                if time.monotonic() - self._at > self.ttl_s:  # nobody refreshed while we waited
                    self._refresh()
        if self._error is not None:
            raise self._error
        return self._runs

    def get(self, run_id: str) -> RunView | None:
        return self.runs().get(run_id)

    def _refresh(self) -> None:
        from jobs.backends.kubernetes import to_status

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
        if run_dir and run_dir not in self._max_steps:
            steps = max_steps(read_config(run_dir))
            if steps is not None:
                self._max_steps[run_dir] = steps
        return RunView(
            status=status,
            instance_type=instance,
            hourly_usd=hourly_usd(instance, status.nodes),
            max_steps=self._max_steps.get(run_dir or ""),
        )
