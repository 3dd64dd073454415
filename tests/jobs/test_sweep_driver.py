"""The sweep's one launch path (jobs/sweep_driver.py) on its own: prepare every point, check
every point, then submit in order with the policy the caller names. (Both callers through it:
tests/api/test_api_boundary.py `test_the_api_and_the_launcher_take_the_one_launch_path`.)"""

from __future__ import annotations

import pytest

from jobs.sweep_driver import PointRefused, Policy, RolledBack, SweepDriver

POINTS = [(4, ["a=1"]), (5, ["a=2"]), (6, ["a=3"])]
"""A batch numbered from 4, as Hydra numbers a second batch."""


class Cluster:
    """What the points did: prepared, submitted, rolled back."""

    def __init__(self, refuse: int | None = None, bad: int | None = None):
        self.refuse, self.bad = refuse, bad
        self.submitted: list[int] = []
        self.rolled_back: list[int] = []

    def prepare(self, points):
        return [index for index, _ in points]

    def check(self, index: int) -> str:
        if index == self.bad:
            raise ValueError("storage.root: set by the service")
        return f"checked-{index}"

    def submit(self, checked: str) -> int:
        index = int(checked.removeprefix("checked-"))
        if index == self.refuse:
            raise RuntimeError("403 Forbidden")
        self.submitted.append(index)
        return index

    def roll_back(self, results: list[int]) -> list[str]:
        self.rolled_back += results
        return [f"run-{index}" for index in results if index == 4]  # changed meanwhile


def driver(cluster: Cluster, policy: Policy, **more) -> SweepDriver:
    return SweepDriver(
        prepare=cluster.prepare,
        check=cluster.check,
        submit=cluster.submit,
        policy=policy,
        roll_back=cluster.roll_back,
        **more,
    )


def test_going_on_submits_every_point_in_order_and_counts_the_failed():
    cluster = Cluster()
    launched = driver(cluster, Policy.GO_ON, failed=lambda index: index == 5).run(POINTS)
    assert cluster.submitted == [4, 5, 6] and launched.results == [4, 5, 6]
    assert launched.prepared == [4, 5, 6] and launched.failed == 1
    assert cluster.rolled_back == []


def test_all_or_nothing_rolls_back_what_was_submitted_and_names_what_was_left():
    cluster = Cluster(refuse=6)
    with pytest.raises(RolledBack) as raised:
        driver(cluster, Policy.ALL_OR_NOTHING).run(POINTS)
    assert cluster.submitted == [4, 5] and cluster.rolled_back == [4, 5]
    err = raised.value
    assert str(err) == (
        "sweep point 6: 403 Forbidden; the 2 point(s) this request submitted before it were "
        "deleted; left in place (changed meanwhile): run-4"
    )
    assert err.line("failed").startswith("sweep point 6: failed; the 2 point(s)")


def test_a_refused_point_stops_the_sweep_before_anything_is_submitted():
    for policy in Policy:
        cluster = Cluster(bad=5)
        with pytest.raises(PointRefused) as raised:
            driver(cluster, policy).run(POINTS)
        assert str(raised.value) == "sweep point 5: storage.root: set by the service"
        assert cluster.submitted == [] and cluster.rolled_back == []


def test_a_bad_point_in_preparation_submits_nothing():
    cluster = Cluster()

    def prepare(points):
        raise ValueError("sweep point 5 (a=2): bad")

    with pytest.raises(ValueError, match="sweep point 5"):
        SweepDriver(prepare, cluster.submit, Policy.GO_ON).run(POINTS)
    assert cluster.submitted == []


def test_all_or_nothing_needs_a_roll_back():
    with pytest.raises(TypeError, match="roll_back"):
        SweepDriver(Cluster().prepare, Cluster().submit, Policy.ALL_OR_NOTHING)
