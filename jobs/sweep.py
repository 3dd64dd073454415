"""Multirun: `trainstack launch -m a=1,2 b=x,y` through Hydra's sweeper and a launcher.

One path for every backend: Hydra's sweeper (the basic one, or any sweeper plugin such as
Optuna's) expands the points and hands them in batches to a launcher, `hydra/launcher=
backend_<backend>` by default (hydra_plugins/trainstack_launcher for local and render,
hydra_plugins/kubernetes_launcher for kubernetes). Before a batch's first point is written or
run, the launcher composes and materializes every point of it (`prepare_points`): one bad
point, or one run id shared by several, and nothing happens (a big batch is prepared in
worker processes: jobs.sweep_workers). The prepared jobs go to the task object Hydra handed
the launcher (jobs.app.LaunchTask), whose points schedule them. Preparing and then submitting
in order is the launch path the Training API's sweeps take too (jobs.sweep_driver). Every
point carries the sweep id (`sweep_id=`, else a new one); `SweepSummary` (a Hydra callback,
conf/config.yaml) writes `<backend.output_root>/sweeps/<sweep_id>/summary.yaml` from the job
returns.
"""

from __future__ import annotations

import copy
import gc
import itertools
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from contract.run_dir import METRICS_FILE
from jobs.backends.run_state import write_atomic
from jobs.errors import one_line
from jobs.materialize import materialize
from jobs.naming import new_sweep_id, sweep_point_run_id
from jobs.submission import git_sha
from jobs.sweep_points import (
    PointResult,
    SweepPointError,
    SweepPointsLost,
    check_one_per_point,
    point_label,
)
from jobs.sweep_workers import prepared_in_workers

SUMMARY_FILE = "summary.yaml"


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
                "overrides": [o for o in p.overrides if not o.startswith("sweep_id=")],
                "run_id": p.run_id,
                "state": p.state,
                "exit_code": p.exit_code,
                "error": p.error,
                **({"loss": p.loss} if p.loss is not None else {}),
                **{k: v for k, v in p.plan.items() if k != "run_id"},
            }
            for p in points
        ],
    }
    write_atomic(path, yaml.safe_dump(summary, sort_keys=False))


def sweep_id_for(config: Any) -> str:
    """The sweep's id: the one given (`sweep_id=`), else a new one."""
    return config.sweep_id or new_sweep_id(datetime.now(UTC))


def with_sweep_id(overrides: Sequence[str], sweep_id: str) -> list[str]:
    given = any(o.startswith("sweep_id=") for o in overrides)
    return list(overrides) if given else [*overrides, f"sweep_id={sweep_id}"]


@dataclass
class PreparedPoint:
    index: int
    cfg: Any
    """The point's full config (with `hydra`), as Hydra's launcher contract composes it."""
    job: Any
    """Its MaterializedJob."""


@contextmanager
def kept_out_of_gc() -> Iterator[Callable[[], None]]:
    """For a launch that keeps every point until the last one ran: `keep()` after each point
    hands what is alive to `gc.freeze`, out of the collector's sight, until the launch ends.

    A prepared point holds two configs and its manifests, thousands of objects; Python's full
    collections walk every live object, so with the batch kept they grew with it, and Hydra's
    composition of a point in a 1,000-point batch took a quarter longer than on its own
    (benchmarks/bench_jobs.py). Each `keep()` first collects what the point left as garbage,
    so nothing that should be freed is frozen."""

    def keep() -> None:
        gc.collect()
        gc.freeze()

    try:
        yield keep
    finally:
        gc.unfreeze()


def prepare_points(
    hydra_context: Any,
    config: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    sweep_id: str,
    keep: Callable[[], None] = lambda: None,
    workers: int = 1,
) -> list[PreparedPoint]:
    """Compose (Hydra's `load_sweep_config`, as every launcher does) and materialize every
    point of a batch, calling `keep()` after each; in `workers` processes when more than one
    (jobs.sweep_workers). Raises SweepPointError on the first bad one, SweepPointsLost unless
    every point came back once, in order; nothing is written."""
    batch = BatchPreparation(hydra_context, config, sweep_id, datetime.now(UTC), git_sha())
    numbered = [(initial_job_idx + offset, list(o)) for offset, o in enumerate(job_overrides)]
    if workers > 1:
        prepared = prepared_in_workers(batch, numbered, workers)
    else:
        prepared = (batch.prepare(index, overrides) for index, overrides in numbered)
    points = []
    for point in prepared:
        points.append(point)
        keep()
    check_one_per_point(numbered, [p.index for p in points])
    run_ids = [p.job.run_id for p in points]
    if len(set(run_ids)) != len(run_ids):
        raise SweepPointError(
            initial_job_idx,
            job_overrides[0],
            "run_id: the same run id for several points; "
            "allowed in a multirun: unset (points get <sweep_id>-<n>)",
        )
    return points


@dataclass
class BatchPreparation:
    """What every point of a batch is prepared with: one clock reading and one git SHA."""

    hydra_context: Any
    config: Any
    sweep_id: str
    now: datetime
    git_sha: str | None

    def prepare(self, index: int, overrides: list[str]) -> PreparedPoint:
        overrides = with_sweep_id(overrides, self.sweep_id)
        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            with open_dict(cfg):
                cfg.hydra.job.id = cfg.hydra.job.num = index
            task_cfg = _task_config(cfg)
            run_id = task_cfg.run_id or sweep_point_run_id(self.sweep_id, index)
            job = materialize(
                task_cfg, now=self.now, git_sha=self.git_sha, run_id=run_id, sweep_id=self.sweep_id
            )
        except (HydraException, OmegaConfBaseException) as err:
            raise SweepPointError(index, overrides, one_line(err)) from None
        except ValueError as err:  # JobConfigError, ManifestError
            raise SweepPointError(index, overrides, str(err)) from None
        return PreparedPoint(index, cfg, job)


def prepare_or_discard(
    hydra_context: Any,
    config: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    sweep_id: str,
    keep: Callable[[], None] = lambda: None,
    workers: int = 1,
) -> list[PreparedPoint]:
    """`prepare_points`; when the sweep's first batch is refused, also remove what Hydra's
    sweeper wrote before launching (`multirun.yaml` and the sweep dirs it made), so a refused
    sweep leaves nothing behind."""
    try:
        return prepare_points(
            hydra_context, config, job_overrides, initial_job_idx, sweep_id, keep, workers
        )
    except (SweepPointError, SweepPointsLost):
        if initial_job_idx == 0:
            discard_sweep_dir(Path(str(config.hydra.sweep.dir)))
        raise


def discard_sweep_dir(sweep_dir: Path) -> None:
    (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
    cwd = Path.cwd().resolve()
    path = sweep_dir.resolve()
    while path != cwd and path != path.parent and path.is_dir() and not any(path.iterdir()):
        path.rmdir()
        path = path.parent


def _task_config(cfg: Any) -> Any:
    """The config the task function sees: the point's without `hydra` (as Hydra's run_job)."""
    task_cfg = copy.deepcopy(cfg)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    return task_cfg


def last_loss(run_dir: str) -> float | None:
    """The last `loss` in a local run's logs/metrics.jsonl."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return None
    loss = None
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        loss = record.get("loss", loss)
    return loss


class SweepSummary(Callback):
    """Hydra callback: collect each point's PointResult, write the summary at the end. (The
    points that failed are counted in the task function, jobs/app.py `LaunchTask`.)"""

    def __init__(self) -> None:
        self.results: list[PointResult] = []

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        if job_return.status != JobStatus.COMPLETED:
            return
        value = job_return.return_value
        if isinstance(value, PointResult):
            self.results.append(value)
            if value.error:
                print(f"{point_label(value.index)}: {value.error}", file=sys.stderr)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        done = [r for r in self.results if r.sweep_id and r.state != "dryrun"]
        if not done:
            return
        results = sorted(done, key=lambda r: r.index)
        sweep_id = results[0].sweep_id
        path = summary_path(config.backend.output_root, sweep_id)
        write_summary(path, sweep_id, config.backend.name, results)
        print(f"sweep {sweep_id}: summary in {path}")


class TooManyPoints(HydraException):
    """A grid past `expand`'s `max_points`: refused while the axes are enumerated."""


def expand(
    overrides: Sequence[str], config_loader: Any = None, max_points: int | None = None
) -> list[list[str]]:
    """Every point of a grid sweep as plain override lists, with Hydra's public override
    grammar (`a,b`, `range()`, `choice()`, `glob()` over a group's options): the basic
    sweeper's grid, for the `trainstack` sweeper and the Training API. `max_points`: raise
    TooManyPoints rather than list more (each axis is read at most that far, so no axis or
    product of axes is enumerated past it, whatever a count made before said)."""
    hydra = GlobalHydra.instance()
    loader = config_loader or (hydra.config_loader() if hydra.is_initialized() else None)
    axes: dict[str, list[str]] = {}
    points = 1
    for override in OverridesParser.create(config_loader=loader).parse_overrides(list(overrides)):
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values = override.sweep_string_iterator()
            if max_points is not None:
                values = itertools.islice(values, max_points + 1)
            axes[key] = [f"{key}={value}" for value in values]
        else:
            raise HydraException(
                f"{override.input_line}: a grid sweep takes a,b / range() / "
                "choice() / glob(); interval() needs an optimizing sweeper"
            )
        points *= len(axes[key])
        if max_points is not None and points > max_points:
            raise TooManyPoints(
                f"{key}: the sweep would have more than {max_points} points; allowed: at most "
                f"{max_points} per request"
            )
    return [list(point) for point in itertools.product(*axes.values())]
