"""`trainstack.Client` against the Training API started with the arguments the stack deploys
it with (the `api` fixture: infra's `serve_args`) over real HTTP: launch, status, logs,
metrics, cancel, a sweep, each HTTP failure as the Python API's own exception, and the shared
scenario (tests/python_api/scenario.py) with the same states and exceptions as in-process."""

from __future__ import annotations

import json

import pytest

import trainstack
from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE, TOKEN
from tests.api.test_api_runs import wait_for
from tests.python_api.scenario import lifecycle

GPU_RUN = (f"compute={GPU_TYPE}",)


@pytest.fixture
def client(api):
    with trainstack.Client(api.url, TOKEN) as client:
        yield client


def test_launch_status_logs_metrics_and_wait_through_the_api(api, apiserver, client):
    apiserver.operator.plans["pc1"] = [JobPlan(steps=6, step_seconds=0.1)]
    run = client.launch("run_id=pc1", *GPU_RUN, values={"job.image": IMAGE})
    assert run.id == "pc1" and run.submitted
    assert run.plan is not None and run.plan["instance_type"] == GPU_TYPE
    assert client.run("pc1").status().state in ("pending", "running", "succeeded")
    lines = list(run.logs(follow=True))
    assert any("step 6 loss" in line for line in lines), lines
    status = run.wait(timeout=30, poll=0.1)
    assert status.state == "succeeded" and status.backend == "kubernetes"
    assert [r.id for r in client.runs(state="succeeded")] == ["pc1"]
    assert "step 6 loss" in "\n".join(run.logs(tail=3))

    logs = api.runs_root / "pc1" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2, 3)) + "\n"
    )
    assert [m["step"] for m in run.metrics()] == [1, 2, 3]


def test_a_dry_run_through_the_api_creates_nothing(api, apiserver, client):
    run = client.launch("run_id=pc-dry", *GPU_RUN, values={"job.image": IMAGE}, dryrun=True)
    assert run.submitted is False and run.request and "kind: PyTorchJob" in run.request
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_cancel_through_the_api_and_wait_raises_run_failed(api, apiserver, client):
    apiserver.operator.plans["pc2"] = [JobPlan(hold=True)]
    run = client.launch("run_id=pc2", *GPU_RUN, values={"job.image": IMAGE})
    wait_for(lambda: run.status().state == "running")
    with pytest.raises(trainstack.WaitTimeout):
        run.wait(timeout=0.2, poll=0.05)
    run.cancel()
    with pytest.raises(trainstack.RunFailed) as caught:
        run.wait(timeout=30, poll=0.1)
    assert caught.value.state == "cancelled"
    run.cancel()  # idempotent, as the API's DELETE


def test_a_sweep_through_the_api_is_all_or_nothing(api, apiserver, client):
    with pytest.raises(trainstack.ConfigError):
        client.sweep(*GPU_RUN, f"job.image={IMAGE}", axes={"trainer.max_steps": [10, -1]})
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    sweep = client.sweep(
        *GPU_RUN, f"job.image={IMAGE}", axes={"trainer.lr": [1e-3, 3e-3]}, sweep_id="psw"
    )
    assert [r.id for r in sweep.runs] == ["psw-0", "psw-1"]
    assert [s.state for s in sweep.wait(timeout=30, poll=0.1)] == ["succeeded", "succeeded"]
    assert sorted(r.id for r in client.runs(sweep="psw")) == ["psw-0", "psw-1"]


def test_http_failures_are_the_python_apis_exceptions(api, apiserver, client):
    with pytest.raises(trainstack.ConfigError) as caught:  # 422
        client.launch(*GPU_RUN, f"job.image={IMAGE}", "trainer.max_stepz=3")
    assert caught.value.key == "trainer.max_stepz"
    with pytest.raises(trainstack.ConfigError) as service_key:  # 422: the service's key
        client.launch(*GPU_RUN, f"job.image={IMAGE}", "backend.wait=true")
    assert service_key.value.key == "backend.wait"
    with pytest.raises(trainstack.ConfigError):  # refused before any request
        client.launch(*GPU_RUN, skip_preflight=True)
    with pytest.raises(trainstack.ConfigError, match="program: a function of your workdir"):
        client.submit([], None, program=print)
    with pytest.raises(trainstack.RunNotFound):  # 404
        client.run("nope")
    with pytest.raises(trainstack.RunNotFound):
        list(client.launch("run_id=pc3", *GPU_RUN, values={"job.image": IMAGE}, dryrun=True).logs())
    with pytest.raises(trainstack.SubmitError):  # the API serves no checkpoints
        trainstack.Run("x", client).checkpoints()
    assert apiserver.list("pytorchjobs", NAMESPACE) == []

    with (
        trainstack.Client(api.url, "ts-wrong-token") as stranger,
        pytest.raises(trainstack.SubmitError),
    ):  # 401
        stranger.runs()
    with (
        trainstack.Client("http://127.0.0.1:9", TOKEN) as nowhere,
        pytest.raises(trainstack.SubmitError),
    ):
        nowhere.runs()


def test_the_shared_scenario_through_the_api(api, apiserver, client):
    apiserver.operator.plans["scenario"] = [JobPlan(hold=True)]
    lifecycle(
        lambda *overrides: client.launch(*GPU_RUN, *overrides, values={"job.image": IMAGE}),
        client.run,
    )
