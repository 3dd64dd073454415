"""Hydra's basic launcher with trainstack's rule first: every point of the batch is composed
and materialized before the first one is written or run (jobs.sweep.prepare_points). Then,
like the basic launcher, each point runs through Hydra's `run_job` (so callbacks see it), one
after another; the task function schedules the job already materialized for it. Both steps
are the sweep's one launch path (jobs.sweep_driver), going on past a point that failed and
counting it in the task (jobs.app.LaunchTask). A point lost
on the way (prepared or run) is an error naming it (jobs.sweep_points.SweepPointsLost). With
`--dryrun` each point's request is printed and nothing is written (no job dirs either).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from hydra.plugins.launcher import Launcher

from jobs import backend_registry, run
from jobs.app import LaunchTask
from jobs.sweep import (
    PreparedPoint,
    kept_out_of_gc,
    prepare_or_discard,
    sweep_id_for,
)
from jobs.sweep_driver import Policy, SweepDriver
from jobs.sweep_points import (
    PointResult,
    check_one_per_point,
    indices_of_returns,
    point_failed,
    point_heading,
)
from jobs.sweep_workers import workers_for


class TrainstackLauncher(Launcher):
    def __init__(self, workers: int = 0) -> None:
        if workers < 0:
            raise ValueError(
                f"hydra.launcher.workers: {workers} is not allowed; allowed: 0 (one per CPU "
                "for a big batch) or the number of processes preparing the points"
            )
        self.workers = workers
        self.config = self.hydra_context = None
        self.task_function: LaunchTask | None = None
        self.sweep_id: str | None = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        """`task_function` is the `trainstack launch` app's task object (jobs.app.LaunchTask):
        the launch's flags, and where each batch's prepared jobs are handed over."""
        if not isinstance(task_function, LaunchTask):
            raise TypeError(
                "hydra.launcher: trainstack's launchers run the `trainstack launch` app's task "
                f"(jobs.app.LaunchTask), not {task_function!r}"
            )
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def prepared(
        self,
        job_overrides: Sequence[Sequence[str]],
        initial_job_idx: int,
        keep: Callable[[], None] = lambda: None,
    ) -> list[PreparedPoint]:
        """Every point of the batch composed and materialized (one sweep id for all batches),
        `keep()` after each (jobs.sweep.kept_out_of_gc), and handed to the task; raises on the
        first bad point, having written nothing."""
        setup_globals()
        self.sweep_id = self.sweep_id or sweep_id_for(self.config)
        workers = workers_for(len(job_overrides), self.workers)
        points = prepare_or_discard(
            self.hydra_context,
            self.config,
            job_overrides,
            initial_job_idx,
            self.sweep_id,
            keep,
            workers,
        )
        self.task_function.hand_over({point.index: point.job for point in points})
        return points

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> list[JobReturn]:
        """The batch through the sweep's one launch path (jobs.sweep_driver): prepare every
        point, then run them one after another (`run_point`), going on past a point that
        failed and counting it in the task; each point is kept out of the collector's sight
        until the batch is done, and `finish` then sees them all. A dry run prints each
        point's request instead."""
        numbered = [(initial_job_idx + offset, list(o)) for offset, o in enumerate(job_overrides)]
        dryrun = self.task_function.flags.dryrun
        with kept_out_of_gc() as keep:

            def submitted(point: PreparedPoint) -> JobReturn:
                ret = self.run_point(point)
                keep()
                return ret

            driver = SweepDriver(
                prepare=lambda _: self.prepared(job_overrides, initial_job_idx, keep),
                submit=dry_run if dryrun else submitted,
                policy=Policy.GO_ON,
                failed=point_failed,
            )
            launched = driver.run(numbered)
        self.task_function.failed_points += launched.failed
        if dryrun:
            return launched.results
        points = launched.prepared
        returns = self.finish(points, launched.results)
        # One result per point: Hydra's sweepers take fewer without a word.
        numbered = [(point.index, list(point.cfg.hydra.overrides.task)) for point in points]
        check_one_per_point(numbered, indices_of_returns(points, returns), ran=True)
        return returns

    def run_point(self, point: PreparedPoint) -> JobReturn:
        """Like the basic launcher: through Hydra's `run_job`, so callbacks see the point."""
        return run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=point.cfg,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )

    def finish(self, points: list[PreparedPoint], returns: list[JobReturn]) -> list[JobReturn]:
        return returns


def dry_run(point: PreparedPoint) -> JobReturn:
    """Print one point's plan and request; write nothing."""
    job = point.job
    print(point_heading(point.index, point.cfg.hydra.overrides.task), flush=True)
    run.run_job(backend_registry.backend_for(job.cfg), job, dryrun=True)
    overrides = list(point.cfg.hydra.overrides.task)
    ret = JobReturn(overrides=overrides, cfg=point.cfg, status=JobStatus.COMPLETED)
    ret.return_value = PointResult(
        point.index,
        overrides,
        job.run_id,
        job.spec.labels.get("trainstack.io/sweep-id"),
        state="dryrun",
        plan=job.plan.summary(),
    )
    return ret
