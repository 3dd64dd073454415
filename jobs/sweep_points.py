"""A sweep point's outcome and the errors of a batch of points: what the launchers, the task
function (jobs/app.py), the batch's preparation (jobs/sweep.py) and its workers
(jobs/sweep_workers.py) share."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException


@dataclass
class PointResult:
    """One sweep point: what the task function returns (and Hydra's JobReturn carries)."""

    index: int
    overrides: list[str]
    run_id: str | None = None
    sweep_id: str | None = None
    state: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    error: str | None = None
    loss: float | None = None
    """The run's last logged training loss (local runs that ran)."""

    @property
    def failed(self) -> bool:
        """It could not be submitted, or its run did not succeed."""
        return bool(self.exit_code or self.error)

    def __float__(self) -> float:
        """The objective an optimizing sweeper (Optuna) minimizes: the final loss of a local
        run, else the estimated cost in USD; NaN when neither is known."""
        if self.loss is not None:
            return float(self.loss)
        cost = self.plan.get("estimated_cost_usd")
        return float(cost) if cost is not None else math.nan


class SweepPointError(CompactHydraException, ValueError):
    """A point that cannot run; raised before any point of its batch is written or run."""

    def __init__(self, index: int, overrides: Sequence[str], message: str):
        super().__init__(f"{point_label(index, _shown(overrides))}: {message}")
        self.reason = message


class SweepPointsLost(CompactHydraException, RuntimeError):
    """A batch's preparation, or its run, gave back other than one point per point asked for:
    a fault in trainstack, not in the sweep. The sweep exits 1 naming the points, never 0
    without some of them."""


def point_label(index: int, shown: Sequence[str] | None = None) -> str:
    """How every message and summary line names a sweep point: `sweep point <n>`, then the
    overrides `shown` (what the caller shows of the point) in parentheses when given."""
    overrides = f" ({' '.join(shown)})" if shown is not None else ""
    return f"sweep point {index}{overrides}"


def point_heading(index: int, overrides: Sequence[str]) -> str:
    """The line that opens a point's output where its run or request is printed in full."""
    return f"\n== point {index}: {' '.join(overrides)}"


def _shown(overrides: Sequence[str]) -> list[str]:
    """A point's overrides as the launchers show them: without the sweep id every point has."""
    return [o for o in overrides if not o.startswith("sweep_id=")]


def check_one_per_point(
    numbered: Sequence[tuple[int, Sequence[str]]], indices: list[int], *, ran: bool = False
) -> None:
    """`indices` (of the points prepared, or of the results of those that ran, in the order
    they came) are exactly those of `numbered` ((Hydra job number, overrides) of the batch),
    in order; else SweepPointsLost naming the points missing, repeated or not of the batch."""
    expected = [index for index, _ in numbered]
    if indices == expected:
        return
    count = Counter(indices)
    # A point is named by what sets it apart: the overrides every point shares are left out.
    shared = set.intersection(*(set(overrides) for _, overrides in numbered)) if numbered else set()
    missing = [
        f"{index} ({' '.join(_shown([o for o in overrides if o not in shared]))})"
        for index, overrides in numbered
        if not count[index]
    ]
    problems = []
    if missing:
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        problems.append(f"missing {len(missing)}: " + ", ".join(missing[:10]) + more)
    repeated = sorted(index for index, times in count.items() if times > 1)
    if repeated:
        problems.append(f"repeated: {', '.join(map(str, repeated))}")
    strangers = sorted(set(count) - set(expected))
    if strangers:
        problems.append(f"not of the batch: {', '.join(map(str, strangers))}")
    stage = "results" if ran else "prepared"
    after = "its results are incomplete" if ran else "nothing was written or run"
    span = f"{expected[0]}..{expected[-1]}" if expected else "(none)"
    raise SweepPointsLost(
        f"sweep points {span}: {len(indices)} {stage} for "
        f"{len(expected)}, {'; '.join(problems or ['out of order'])}; {after}"
    )


def indices_of_returns(points: Sequence[Any], returns: Sequence[Any]) -> list[int]:
    """The point each JobReturn is for, found by the task overrides it records (Hydra's
    `run_job` copies them from the point's config); -1 for one of no point."""
    by_overrides: dict[tuple[str, ...], list[int]] = {}
    for point in points:
        by_overrides.setdefault(tuple(point.cfg.hydra.overrides.task), []).append(point.index)
    indices = []
    for ret in returns:
        candidates = by_overrides.get(tuple(ret.overrides or ()), [])
        indices.append(candidates.pop(0) if candidates else -1)
    return indices


def point_failed(ret: JobReturn) -> bool:
    """A launched point's JobReturn is a failure: Hydra's status says so (the launcher's
    verdict), or the task's PointResult does."""
    if ret.status != JobStatus.COMPLETED:
        return True
    value = ret.return_value
    return isinstance(value, PointResult) and value.failed


class PointFailed(CompactHydraException):
    """The JobReturn value of a point that could not be submitted or did not succeed (compact:
    Hydra prints its message alone, not a traceback); the sweep exits 1."""
