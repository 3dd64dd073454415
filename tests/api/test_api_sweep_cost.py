"""Issue 43 item 9: what a sweep costs the service. Posting the same sweep again while its runs
are active is answered from what the service submitted (nothing composed), and one user has
one sweep submission in flight at a time (429 past it)."""

from __future__ import annotations

import threading

from jobs import submission
from jobs.api.sweep_ledger import SweepLedger
from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE
from tests.api.test_api_boundary import refused


def _sweep(sweep_id: str, warmups: list[int]) -> dict:
    axes = {"trainer.lr": [1e-3, 2e-3], "trainer.warmup_steps": warmups}
    return {"compute": GPU_TYPE, "image": IMAGE, "axes": axes, "sweep_id": sweep_id}


def _counting_prepare(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = submission.prepare

    def prepare(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(submission, "prepare", prepare)
    return calls


def test_the_same_sweep_again_is_answered_without_composing(api, apiserver, monkeypatch):
    """A 64-point sweep posted again, every point active, held a worker as long as the first
    time (about 28 s) for 64 `already active`."""
    for index in range(4):
        apiserver.operator.plans[f"rep-{index}"] = [JobPlan(hold=True)]
    first = api.client.post("/v1/sweeps", json=_sweep("rep", [0, 1]))
    assert first.status_code == 201, first.text
    calls = _counting_prepare(monkeypatch)
    again = api.client.post("/v1/sweeps", json=_sweep("rep", [0, 1]))
    assert again.status_code == 201, again.text
    assert calls == []
    runs, runs_before = again.json()["runs"], first.json()["runs"]
    assert [r["run_id"] for r in runs] == [r["run_id"] for r in runs_before]
    assert {r["outcome"] for r in runs} == {"already active"}
    assert [r["plan"] for r in runs] == [r["plan"] for r in runs_before]
    assert {k: v for k, v in apiserver.operator.created.items() if k.startswith("rep")} == {
        f"rep-{i}": 1 for i in range(4)
    }
    # Another request under the same sweep id is composed and checked as any other (a change
    # a relaunch may make: the relaunch rule holds for the points of existing runs).
    changed = api.client.post(
        "/v1/sweeps", json={**_sweep("rep", [0, 1]), "trainer": {"max_steps": 9}}
    )
    assert changed.status_code == 201, changed.text
    assert len(calls) == 4
    moved = refused(api.client.post("/v1/sweeps", json=_sweep("rep", [0, 2])))
    assert moved.startswith("sweep point 1 (") and "trainer.warmup_steps: run rep-1" in moved


def test_one_user_has_one_sweep_submission_in_flight(api, apiserver, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    real = submission.prepare

    def prepare(*args, **kwargs):
        entered.set()
        assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(submission, "prepare", prepare)
    answers: list = []
    first = threading.Thread(
        target=lambda: answers.append(api.client.post("/v1/sweeps", json=_sweep("busy1", [0])))
    )
    first.start()
    try:
        assert entered.wait(60)
        busy = api.client.post("/v1/sweeps", json=_sweep("busy2", [0]))
        assert busy.status_code == 429, busy.text
        assert busy.json()["detail"] == (
            "sweeps: 1 of yours being submitted; allowed: 1 at a time (wait for its answer)"
        )
    finally:
        release.set()
        first.join(60)
    assert answers[0].status_code == 201, answers[0].text
    assert apiserver.get("pytorchjobs", "busy2-0", NAMESPACE) is None
    after = api.client.post("/v1/sweeps", json=_sweep("busy2", [0]))
    assert after.status_code == 201, after.text


def test_the_ledger_keeps_a_bounded_number_of_points():
    ledger = SweepLedger(remembered=10)
    for index in range(5):
        ledger.remember([f"sweep_id={index}"], list(range(4)))
    kept = [index for index in range(5) if ledger.recall([f"sweep_id={index}"]) is not None]
    assert kept == [3, 4]  # 8 points kept, the oldest sweeps forgotten first
    ledger.remember(["sweep_id=4"], list(range(4)))  # the same again: counted once
    assert ledger.recall(["sweep_id=3"]) is not None
