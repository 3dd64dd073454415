"""Multirun: `trainstack launch -m a=1,2 b=x,y` -> one job per point, one sweep id, a summary.

Points are expanded with Hydra's own sweep grammar (BasicSweeper), composed, validated and
materialized ALL before the first one is written or started, so one bad point means nothing
happens. Then each point goes to the backend (render: files; local: one after another) and
`<backend.output_root>/sweeps/<sweep_id>/summary.yaml` records every point and the total
estimated cost.

A sweep that selects another Hydra launcher (`hydra/launcher=pytorchjob`) goes through
`hydra.main` instead: `launch_point` is the task function and `SweepSummary` (a Hydra
callback, registered in conf/config.yaml) writes the same summary from the job returns.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback

from jobs.backends.run_state import write_atomic
from jobs.errors import EXIT_BAD_INPUT
from jobs.naming import new_sweep_id, sweep_point_run_id

SUMMARY_FILE = "summary.yaml"


@dataclass
class PointResult:
    """One sweep point: what a task function returns (and Hydra's JobReturn carries)."""

    index: int
    overrides: list[str]
    run_id: str | None = None
    state: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    error: str | None = None


def expand(overrides: list[str]) -> list[list[str]]:
    """Every point of the sweep, as plain override lists (Hydra's BasicSweeper semantics)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return BasicSweeper.split_arguments(parsed, None)[0]


def sweep_id_of(overrides: list[str], now: datetime) -> str:
    """The last `sweep_id=` override, else a new id. A given id is kept: re-running the
    sweep with it addresses the same runs."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("sweep_id=")]
    return given[-1] if given else new_sweep_id(now)


def summary_path(output_root: str, sweep_id: str) -> Path:
    return Path(output_root) / "sweeps" / sweep_id / SUMMARY_FILE


def write_summary(path: Path, sweep_id: str, backend: str, points: list[PointResult]) -> None:
    costs = [p.plan.get("estimated_cost_usd") for p in points]
    known = [c for c in costs if c is not None]
    summary = {
        "sweep_id": sweep_id,
        "backend": backend,
        "written_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "points": len(points),
        "total_estimated_cost_usd": round(sum(known), 2) if known else None,
        "points_without_estimate": len(costs) - len(known),
        "runs": [
            {
                "index": p.index,
                "overrides": p.overrides,
                "run_id": p.run_id,
                "state": p.state,
                "exit_code": p.exit_code,
                "error": p.error,
                **{k: v for k, v in p.plan.items() if k != "run_id"},
            }
            for p in points
        ],
    }
    write_atomic(path, yaml.safe_dump(summary, sort_keys=False))


def materialize_points(
    points: list[list[str]], *, sweep_id: str, git_sha: str | None, now: datetime
) -> list[Any]:
    """Compose and materialize every point (pure). Raises on the first bad point, prefixed
    with the point's overrides."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from jobs.compose import compose_points, composer
    from jobs.errors import one_line
    from jobs.materialize import materialize

    jobs = []
    with composer():
        configs = compose_points(points)
        for index, point in enumerate(points):
            try:
                cfg = next(configs)
                run_id = cfg.run_id or sweep_point_run_id(sweep_id, index)
                jobs.append(
                    materialize(cfg, now=now, git_sha=git_sha, run_id=run_id, sweep_id=sweep_id)
                )
            except (HydraException, OmegaConfBaseException) as err:
                raise SweepPointError(index, point, one_line(err)) from None
            except ValueError as err:  # JobConfigError, ManifestError
                raise SweepPointError(index, point, str(err)) from None
    run_ids = [job.run_id for job in jobs]
    if len(set(run_ids)) != len(run_ids):
        raise SweepPointError(
            0,
            points[0],
            "run_id: the same run id for several points; "
            "allowed in a multirun: unset (points get <sweep_id>-<n>)",
        )
    return jobs


class SweepPointError(ValueError):
    def __init__(self, index: int, overrides: list[str], message: str):
        super().__init__(f"sweep point {index} ({' '.join(overrides)}): {message}")


def launch_sweep(overrides: list[str], *, dryrun: bool, git_sha: str | None) -> int:
    """`trainstack launch -m ...`; returns the exit code."""
    from hydra.errors import HydraException

    now = datetime.now(UTC)
    sweep_id = sweep_id_of(overrides, now)
    # Every point is checked first, also when a Hydra launcher was chosen by hand: one bad
    # point, or one run id shared by several points, means nothing is submitted.
    own = [o for o in overrides if not o.startswith(("hydra/", "hydra."))]
    try:
        points = expand(own)
        jobs = materialize_points(points, sweep_id=sweep_id, git_sha=git_sha, now=now)
    except (HydraException, SweepPointError) as err:
        print(f"trainstack launch: {str(err).splitlines()[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if len(own) != len(overrides):
        return hydra_multirun([*overrides, f"sweep_id={sweep_id}"])
    if not dryrun and all(job.cfg.backend.name == "kubernetes" for job in jobs):
        # Every point is valid: the cluster launcher submits them (concurrent --wait, skip on
        # re-run of the same sweep_id, auto-restart).
        mode = "wait" if jobs[0].cfg.backend.wait else "submit"
        launcher = ["hydra/launcher=pytorchjob", f"hydra.launcher.mode={mode}"]
        return hydra_multirun([*overrides, *launcher, f"sweep_id={sweep_id}"])
    return run_points(jobs, points, sweep_id=sweep_id, dryrun=dryrun)


def run_points(jobs: list[Any], points: list[list[str]], *, sweep_id: str, dryrun: bool) -> int:
    from jobs.backends import backend_for
    from jobs.backends.base import BackendError
    from jobs.run import follows, run_job

    results, exit_code = [], 0
    total = sum(job.plan.cost_usd or 0 for job in jobs)
    print(f"sweep {sweep_id}: {len(jobs)} points, estimated total ${total:,.2f}", flush=True)
    for index, (job, point) in enumerate(zip(jobs, points, strict=True)):
        backend = backend_for(job.cfg)
        brief = not (dryrun or follows(job))
        if not brief:
            print(f"\n== point {index}: {' '.join(point)}", flush=True)
        result = PointResult(index, point, job.run_id, plan=job.plan.summary())
        try:
            code = run_job(backend, job, dryrun=dryrun, brief=brief)
            result.state = "dryrun" if dryrun else backend.status(job.run_id).state
            result.exit_code = code
        except BackendError as err:
            code, result.error = 1, str(err)
            print(f"trainstack launch: {err}", file=sys.stderr)
        exit_code = exit_code or code
        results.append(result)
    if not dryrun:
        path = summary_path(jobs[0].cfg.backend.output_root, sweep_id)
        write_summary(path, sweep_id, jobs[0].cfg.backend.name, results)
        print(f"\nsweep {sweep_id}: summary in {path}")
    return exit_code


# --- the hydra.main path, for sweeps run by another Hydra launcher ---------------------------


def launch_point(cfg: Any) -> PointResult:
    """Hydra task function: materialize one point and schedule it on its backend. Errors are
    returned, not raised, so one bad point never stops the others."""
    from hydra.core.hydra_config import HydraConfig

    from jobs.backends import backend_for
    from jobs.materialize import materialize
    from jobs.submission import git_sha

    hydra_cfg = HydraConfig.get()
    index = hydra_cfg.job.num
    result = PointResult(index, list(hydra_cfg.overrides.task))
    try:
        run_id = cfg.run_id or sweep_point_run_id(cfg.sweep_id, index)
        job = materialize(cfg, now=datetime.now(UTC), git_sha=git_sha(), run_id=run_id)
        result.run_id, result.plan = job.run_id, job.plan.summary()
        backend = backend_for(cfg)
        backend.schedule(backend.dryrun(job))
        result.state = backend.status(job.run_id).state
    except Exception as err:  # reported per point in the summary
        result.error = str(err).splitlines()[0] if str(err) else type(err).__name__
    return result


class SweepSummary(Callback):
    """Hydra callback: collect each point's PointResult, write the summary at the end."""

    failed_points = 0
    """Points of the last sweep that could not be scheduled (read by `hydra_multirun`)."""

    def __init__(self) -> None:
        self.results: list[PointResult] = []

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        if job_return.status != JobStatus.COMPLETED:
            SweepSummary.failed_points += 1
            return
        value = job_return.return_value
        if isinstance(value, PointResult):
            self.results.append(value)
            if value.error:
                SweepSummary.failed_points += 1
                print(f"sweep point {value.index}: {value.error}", file=sys.stderr)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if not self.results or config.sweep_id is None:
            return
        results = sorted(self.results, key=lambda r: r.index)
        path = summary_path(config.backend.output_root, config.sweep_id)
        write_summary(path, config.sweep_id, config.backend.name, results)
        print(f"sweep {config.sweep_id}: summary in {path}")


def hydra_multirun(overrides: list[str]) -> int:
    import hydra

    from jobs.compose import CONF_DIR, CONFIG_NAME, HYDRA_VERSION_BASE
    from jobs.schema import register

    register()
    sweep_id = sweep_id_of(overrides, datetime.now(UTC))
    overrides = [o for o in overrides if not o.startswith("sweep_id=")]
    main = hydra.main(
        config_path=str(CONF_DIR), config_name=CONFIG_NAME, version_base=HYDRA_VERSION_BASE
    )(launch_point)
    saved = sys.argv
    sys.argv = ["trainstack-launch", "--multirun", *overrides, f"sweep_id={sweep_id}"]
    SweepSummary.failed_points = 0
    try:
        main()
    finally:
        sys.argv = saved
    return 1 if SweepSummary.failed_points else 0
