"""The kubernetes launcher (`hydra/launcher=kubernetes`; aliases `trainjob`, `pytorchjob`):
submit every point of a Hydra multirun as a TrainJob or PyTorchJob (`job.api`), optionally
follow them all.

Every point of the batch is composed and materialized first (jobs.sweep.prepare_points): one
bad point and nothing is submitted. Then each point runs the task function (the `trainstack
launch` app's: schedule the job prepared for it) through Hydra's own `run_job`, so callbacks
(the sweep summary) see every point. A point that fails to submit is reported and the others
go on (the sweep's launch path, jobs.sweep_driver, as the basic-style launcher's). Run ids are
`<sweep_id>-<point index>` unless set, so re-running a sweep with the same `sweep_id` finds
its points again and skips those already submitted. In wait mode the points are followed
concurrently (with auto-restart on failure) and each final state becomes the JobReturn's
status.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, run_job

from hydra_plugins.kubernetes_launcher.config import MODES
from hydra_plugins.trainstack_launcher.launcher import TrainstackLauncher
from jobs import backend_registry
from jobs.backends.base import CANCELLED, FAILED, SUCCEEDED, BackendError
from jobs.naming import sweep_point_run_id
from jobs.sweep_points import PointFailed, PointResult

log = logging.getLogger(__name__)


class KubernetesLauncher(TrainstackLauncher):
    """The same preparation of every point as the basic-style launcher; then submit."""

    def __init__(
        self,
        mode: str | None = None,
        max_parallel: int = 16,
        skip_submitted: bool = True,
        workers: int = 0,
    ):
        if mode is not None and mode not in MODES:
            raise ValueError(f"hydra.launcher.mode: {mode!r} is not allowed; allowed: {MODES}")
        if max_parallel < 1:
            raise ValueError(f"hydra.launcher.max_parallel: {max_parallel} must be at least 1")
        self.mode = mode
        self.max_parallel = max_parallel
        self.skip_submitted = skip_submitted
        super().__init__(workers)

    def run_point(self, point: Any) -> JobReturn:
        return self._submit(point.index, point.cfg)

    def finish(self, points: list, returns: list[JobReturn]) -> list[JobReturn]:
        """Submit mode: as submitted. Wait mode: follow every point to its end."""
        mode = self.mode or ("wait" if points and points[0].job.cfg.backend.wait else "submit")
        if mode == "wait":
            configs = [point.cfg for point in points]
            with ThreadPoolExecutor(max_workers=self.max_parallel) as pool:
                returns = list(pool.map(self._follow, returns, configs))
        return returns

    def _submit(self, index: int, cfg: Any) -> JobReturn:
        run_id = cfg.run_id or sweep_point_run_id(cfg.sweep_id, index)
        overrides = list(cfg.hydra.overrides.task)
        existing = self._existing(cfg, run_id) if self.skip_submitted else None
        if existing is not None:
            print(f"point {index}: {run_id} already submitted ({existing.state}); skipped")
            ret = JobReturn(overrides=overrides, cfg=cfg, status=JobStatus.COMPLETED)
            ret.return_value = PointResult(
                index, overrides, run_id, cfg.sweep_id, state=existing.state
            )
            self.hydra_context.callbacks.on_job_end(config=cfg, job_return=ret)
            return ret
        ret = run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=cfg,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        point = ret.return_value if ret.status == JobStatus.COMPLETED else None
        if point is not None and getattr(point, "error", None):
            print(f"point {index}: not submitted: {point.error}")
            ret.status, ret.return_value = JobStatus.FAILED, PointFailed(point.error)
        elif point is not None:
            print(f"point {index}: {point.run_id} {point.state}")
        return ret

    def _existing(self, cfg: Any, run_id: str) -> Any:
        try:
            status = backend_registry.backend_for(cfg, self.task_function.shared).status(run_id)
        except BackendError:
            return None
        return None if status.state in (FAILED, CANCELLED) else status

    def _follow(self, ret: JobReturn, cfg: Any) -> JobReturn:
        """Block until the point's run ends; COMPLETED only when it succeeded."""
        if ret.status != JobStatus.COMPLETED:
            return ret
        point = ret.return_value
        # The launch's backends share what the point's was scheduled with: it may restart it.
        backend = backend_registry.backend_for(cfg, self.task_function.shared)
        try:
            wait = getattr(backend, "wait", None)
            final = wait(point.run_id, on_line=print) if wait else backend.status(point.run_id)
        except BackendError as err:
            final_state, message = "unknown", str(err)
        else:
            final_state, message = final.state, final.message
        point.state = final_state
        if final_state != SUCCEEDED:
            detail = f" ({message})" if message else ""
            ret.status = JobStatus.FAILED
            ret.return_value = PointFailed(f"{point.run_id}: {final_state}{detail}")
        return ret
