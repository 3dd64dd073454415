"""Issue 47, scenario 3: the Training API SIGKILLed between the points of a sweep and in the
middle of a run's submission, then restarted.

`trainstack serve` runs as its own process with the stack's deployed arguments, against the
Kubernetes REST API test double (the same journal calls, ConfigMaps and job kinds the real
control plane serves; not yet run against localcluster). The kill lands where a test-only
pause holds the service (jobs/backends/kubernetes/faults.py: the test waits for its
line, then SIGKILLs the pid), not on a timer. After the restart: no half sweep (the restart
rolls it back), no run half-submitted (a ConfigMap without its job is removed; one without
its owner gets it), and posting the same requests again makes each run exactly once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from jobs.backends.kubernetes.faults import PAUSE_ENV, RECOVER_AFTER_ENV
from testing_support.api_process import ApiProcess
from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import (
    APPROVED_REGISTRY,
    GPU_TYPE,
    IMAGE,
    NAMESPACE,
    TOKEN,
    deployed_overrides,
)

SWEEP = {
    "overrides": [f"compute={GPU_TYPE}", f"job.image={IMAGE}", "trainer.lr=1e-3,2e-3,3e-3"],
    "sweep_id": "killed",
}
JOURNAL_SELECTOR = "trainstack.io/sweep-journal"


@pytest.fixture
def served(kubeconfig, token_dir, tmp_path) -> Iterator[ApiProcess]:
    overrides = [
        *deployed_overrides(),
        "storage=local",
        f"storage.root={tmp_path / 'runs'}",
        f"cluster.kubeconfig={kubeconfig}",
        f"cluster.approved_images=[{APPROVED_REGISTRY}]",
    ]
    api = ApiProcess(token_dir, overrides, tmp_path)
    yield api
    api.stop()


def client(api: ApiProcess, token: str = TOKEN) -> httpx.Client:
    return httpx.Client(
        base_url=api.url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        verify=api.verify,
    )


def post_until_killed(
    api: ApiProcess, path: str, body: dict, token: str = TOKEN
) -> threading.Thread:
    """POST in a thread; the service dies under it (the client sees the connection go)."""

    def post() -> None:
        with client(api, token) as c, contextlib.suppress(httpx.HTTPError):
            c.post(path, json=body)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def jobs_of(apiserver, sweep_id: str | None = None) -> list[str]:
    items = apiserver.list("pytorchjobs", NAMESPACE)
    return sorted(
        j["metadata"]["name"]
        for j in items
        if sweep_id is None or j["metadata"]["labels"].get("trainstack.io/sweep-id") == sweep_id
    )


def wait_until(predicate, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def journals(apiserver) -> list[dict]:
    return [
        cm
        for cm in apiserver.list("configmaps", NAMESPACE)
        if JOURNAL_SELECTOR in (cm["metadata"].get("labels") or {})
    ]


def test_killed_between_points_of_a_sweep_the_restart_rolls_it_back(served, apiserver):
    served.start(env={PAUSE_ENV: "sweep:after-point-1"})
    request = post_until_killed(served, "/v1/sweeps", SWEEP)
    served.wait_for_line("paused at sweep:after-point-1")
    assert jobs_of(apiserver, "killed") == ["killed-0", "killed-1"]  # a half sweep, for now
    assert len(journals(apiserver)) == 1
    killed_at = time.monotonic()
    served.kill()
    request.join(timeout=30)

    served.start()
    recovered = time.monotonic() - killed_at
    wait_until(lambda: jobs_of(apiserver, "killed") == [], timeout_s=15)
    assert "sweep killed was cut short by a restart: rolled back 2 run(s)" in served.log()
    assert journals(apiserver) == []
    assert not [cm for cm in apiserver.list("configmaps", NAMESPACE) if "killed-" in str(cm)]
    with client(served) as c:
        again = c.post("/v1/sweeps", json=SWEEP)
        assert again.status_code == 201, again.text
        assert [r["outcome"] for r in again.json()["runs"]] == ["created"] * 3
    assert jobs_of(apiserver, "killed") == ["killed-0", "killed-1", "killed-2"]
    assert journals(apiserver) == []
    print(
        f"\n[scenario 3] sweep: 1 kill after 2 of 3 points; 0 runs left of it; "
        f"restart and rollback {recovered:.1f} s"
    )


def test_killed_mid_submission_the_restart_leaves_nothing_half_submitted(served, apiserver):
    apiserver.operator.plans["half"] = [JobPlan(hold=True)]  # active until the test ends
    served.start(env={PAUSE_ENV: "submit:companions"})
    body = {"run_id": "half", "compute": GPU_TYPE, "image": IMAGE}
    request = post_until_killed(served, "/v1/runs", body)
    served.wait_for_line("paused at submit:companions")
    assert apiserver.get("configmaps", "half-config", NAMESPACE) is not None
    assert jobs_of(apiserver) == []
    killed_at = time.monotonic()
    served.kill()
    request.join(timeout=30)

    served.start(env={RECOVER_AFTER_ENV: "0"})  # the leftover is not another replica's
    recovered = time.monotonic() - killed_at
    assert apiserver.get("configmaps", "half-config", NAMESPACE) is None
    assert "run half: a submission cut short before its job" in served.log()
    with client(served) as c:
        created = c.post("/v1/runs", json=body)
        assert created.status_code == 201, created.text
        again = c.post("/v1/runs", json=body)  # the client's retry: the same run, not a second
        assert again.status_code == 200 and again.json()["outcome"] == "already active"
    assert jobs_of(apiserver) == ["half"]
    config = apiserver.get("configmaps", "half-config", NAMESPACE)
    assert config["metadata"]["ownerReferences"][0]["name"] == "half"
    print(
        f"\n[scenario 3] submission: 1 kill between ConfigMap and job; 0 half-submitted, "
        f"0 twice; restart and tidy {recovered:.1f} s"
    )
