"""The one launch path of a sweep's points, taken by the Hydra launchers
(hydra_plugins/trainstack_launcher, hydra_plugins/kubernetes_launcher) and the Training API
(jobs/api/service.py `Service.submit_sweep`).

The points come expanded (Hydra's sweeper, or `jobs.sweep.expand`) as (number, overrides).
`SweepDriver.run` then:
1. prepares every point (compose, validate, materialize: the caller's `prepare`, which raises
   on the first bad point, naming it): nothing is written or submitted before all are ready;
2. checks every prepared point (`check`, optional: it returns what `submit` takes); a refusal
   is `PointRefused`, naming the point, and again nothing was submitted;
3. submits the points in order (`submit`), and on a point that fails applies `policy`:
   - `GO_ON` (the launchers): the others are submitted all the same; a failed point is one
     whose result `failed` says so, and the failed points are counted;
   - `ALL_OR_NOTHING` (the API): the first point whose `submit` raises ends the sweep; what was
     submitted before it is rolled back (`roll_back`, which returns the run ids it had to leave
     in place), and `RolledBack` says which point failed and what was left;
4. returns `Launched`: the points prepared, their results in order, the failed count (what the
   sweep's summary is made from: the Hydra callback `jobs.sweep.SweepSummary`, the API's
   response).

These messages name a point as a bad point's refusal and the summary's lines do:
`jobs.sweep_points.point_label`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from jobs.sweep_points import point_label

Job = TypeVar("Job")
"""A prepared point, as the caller's `prepare` makes it."""
Checked = TypeVar("Checked")
"""A prepared point that passed `check`, as `submit` takes it."""
Result = TypeVar("Result")
"""A submitted point's outcome, as the caller's `submit` returns it."""

Numbered = Sequence[tuple[int, Sequence[str]]]
"""Points as (number, overrides), in order."""


class Policy(Enum):
    GO_ON = "go on"
    """Submit every point; count those that failed."""
    ALL_OR_NOTHING = "all or nothing"
    """The first point that fails to submit rolls back those submitted before it."""


class PointError(Exception):
    """A point that ended the sweep: `index` its number, `cause` what its stage raised."""

    def __init__(self, index: int, cause: Exception):
        self.index, self.cause = index, cause
        super().__init__(self.line(str(cause)))

    def line(self, detail: str) -> str:
        """The one line naming the point, with `detail` (the cause as the caller shows it)."""
        return f"{point_label(self.index)}: {detail}"


class PointRefused(PointError):
    """A prepared point refused by `check`; nothing was submitted."""


class RolledBack(PointError):
    """All or nothing: the point failed to submit, so the `submitted` points before it were
    rolled back, except `left` (run ids left in place)."""

    def __init__(self, index: int, cause: Exception, submitted: int, left: list[str]):
        self.submitted, self.left = submitted, left
        super().__init__(index, cause)

    def line(self, detail: str) -> str:
        kept = f"; left in place (changed meanwhile): {', '.join(self.left)}" if self.left else ""
        return (
            f"{super().line(detail)}; the {self.submitted} point(s) this request submitted "
            f"before it were deleted{kept}"
        )


@dataclass
class Launched(Generic[Job, Result]):
    prepared: list[Job]
    """Every point prepared, in order."""
    results: list[Result]
    """Each submitted point's result, in order (all of them unless rolled back)."""
    failed: int = 0
    """Points whose result `failed` says failed (GO_ON)."""


def _never_failed(result: Any) -> bool:
    return False


def _nothing_to_check(job: Any) -> Any:
    return job


@dataclass
class SweepDriver(Generic[Job, Checked, Result]):
    """A sweep's points through prepare -> check -> submit, with a policy for a failed point
    (the module's docstring)."""

    prepare: Callable[[Numbered], list[Job]]
    """Every point prepared, in order, one per point; raises on the first bad one."""
    submit: Callable[[Checked], Result]
    """Submits one checked point."""
    policy: Policy
    check: Callable[[Job], Checked] = _nothing_to_check
    """Raises to refuse a prepared point (before any point is submitted), else returns what
    `submit` takes (by default the prepared point itself)."""
    failed: Callable[[Result], bool] = _never_failed
    """GO_ON: whether a submitted point's result is a failure (counted)."""
    roll_back: Callable[[list[Result]], list[str]] | None = None
    """ALL_OR_NOTHING: undo the results given; returns the run ids left in place."""

    def __post_init__(self) -> None:
        if self.policy is Policy.ALL_OR_NOTHING and self.roll_back is None:
            raise TypeError("SweepDriver: ALL_OR_NOTHING needs roll_back")

    def run(self, points: Numbered) -> Launched[Job, Result]:
        numbers = [index for index, _ in points]
        prepared = self.prepare(points)
        checked = self.check_all(numbers, prepared)
        launched: Launched[Job, Result] = Launched(prepared, [])
        self.submit_in_order(numbers, checked, launched)
        return launched

    def check_all(self, numbers: list[int], prepared: list[Job]) -> list[Checked]:
        """Every prepared point checked before the first is submitted."""
        checked = []
        for index, job in zip(numbers, prepared, strict=True):
            try:
                checked.append(self.check(job))
            except Exception as err:
                raise PointRefused(index, err) from err
        return checked

    def submit_in_order(
        self, numbers: list[int], checked: list[Checked], launched: Launched[Job, Result]
    ) -> None:
        """Each point submitted in turn, its result added to `launched`; a failed point is
        handled by the policy."""
        for index, job in zip(numbers, checked, strict=True):
            try:
                result = self.submit(job)
            except Exception as err:
                if self.policy is not Policy.ALL_OR_NOTHING:
                    raise  # GO_ON: a point's failure comes back as its result, not raised
                left = self.roll_back(launched.results) if self.roll_back else []
                raise RolledBack(index, err, len(launched.results), left) from err
            launched.results.append(result)
            launched.failed += 1 if self.failed(result) else 0
