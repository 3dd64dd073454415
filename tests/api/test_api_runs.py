"""Submitting, reading, cancelling and streaming runs through the API, over HTTP."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE, USER

SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)
    return value


def stored(apiserver, run_id: str) -> dict:
    """The run's PyTorchJob and ConfigMap as the fake cluster holds them, server fields and
    status (the operator's) dropped."""
    objects = {}
    for plural, name in (("pytorchjobs", run_id), ("configmaps", f"{run_id}-config")):
        obj = json.loads(json.dumps(apiserver.get(plural, name, NAMESPACE)))
        obj.pop("status", None)
        for key in SERVER_FIELDS:
            obj["metadata"].pop(key, None)
        for owner in obj["metadata"].get("ownerReferences", []):
            owner.pop("uid", None)
        objects[plural] = obj
    return objects


def test_post_creates_the_run_and_is_idempotent_by_run_id(api, apiserver):
    apiserver.operator.plans["r1"] = [JobPlan(hold=True)]
    first = api.client.post("/v1/runs", json=api.run_request("r1", gpus_per_node=4))
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["outcome"] == "created" and body["run_id"] == "r1"
    assert body["plan"]["procs_per_node"] == 4 and body["plan"]["instance_type"] == GPU_TYPE
    assert body["plan"]["hourly_usd"] > 0 and body["plan"]["estimated_cost_usd"] is not None
    job = apiserver.get("pytorchjobs", "r1", NAMESPACE)
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert master["resources"]["limits"]["nvidia.com/gpu"] == "4"

    again = api.client.post("/v1/runs", json=api.run_request("r1", gpus_per_node=4))
    assert again.status_code == 200 and again.json()["outcome"] == "already active"
    assert apiserver.operator.created["r1"] == 1  # nothing was sent the second time

    refused = api.client.post("/v1/runs", json=api.run_request("r1", resume=False))
    assert refused.status_code == 409
    assert "resume=false" in refused.json()["detail"]

    run = wait_for(lambda: (r := api.client.get("/v1/runs/r1").json())["state"] == "running" and r)
    assert run["nodes"] == 1 and run["retries"] == 0 and run["started_at"]
    assert run["instance_type"] == GPU_TYPE and run["hourly_usd"] > 0
    assert run["run_dir"] == f"{api.runs_root}/r1"


def test_a_finished_run_posted_again_resumes(api, apiserver):
    assert api.client.post("/v1/runs", json=api.run_request("r2")).status_code == 201
    wait_for(lambda: api.client.get("/v1/runs/r2").json()["state"] == "succeeded")
    again = api.client.post("/v1/runs", json=api.run_request("r2"))
    assert again.status_code == 201 and again.json()["outcome"] == "resumed"
    assert apiserver.operator.created["r2"] == 2


def test_post_and_cli_launch_create_identical_manifests(
    api, apiserver, trainstack, monkeypatch, capsys
):
    from jobs import submission

    fixed = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    monkeypatch.setattr(submission, "utc_now", lambda: fixed)
    monkeypatch.setenv("TRAINSTACK_USER", USER)  # the CLI's user is the token's
    for plan in ("twin",):
        apiserver.operator.plans[plan] = [JobPlan(hold=True), JobPlan(hold=True)]
    where = f"storage.root={api.runs_root}"
    extra = ["trainer.max_steps=40", "model=llama3_1b"]
    assert (
        trainstack("launch", "run_id=twin", "compute.gpus_per_node=2", *extra, where, launch=True)
        == 0
    )
    by_cli = stored(apiserver, "twin")
    time.sleep(1)  # the API's submission is seconds later: only the fixed clock can match them
    # Clear the cluster, then submit the same inputs as a structured request.
    apiserver.remove("pytorchjobs", "twin", NAMESPACE)
    apiserver.remove("configmaps", "twin-config", NAMESPACE)
    request = api.run_request("twin", gpus_per_node=2, model="llama3_1b", trainer={"max_steps": 40})
    response = api.client.post("/v1/runs", json=request)
    assert response.status_code == 201, response.text
    # Equal to the second: `created-at` comes from the submission's clock (fixed above), not
    # the backend's own (the two submissions were a second apart about 1 run in 4).
    assert stored(apiserver, "twin") == by_cli
    # ... and as plain overrides, by dry run: the same text `launch --dryrun` prints.
    overrides = ["run_id=dry", f"compute={GPU_TYPE}", f"job.image={IMAGE}", *extra]
    dry = api.client.post("/v1/runs?dryrun=true", json={"overrides": overrides})
    assert dry.status_code == 200 and dry.json()["outcome"] == "dryrun"
    capsys.readouterr()
    assert trainstack("launch", "--dryrun", "run_id=dry", *extra, where, launch=True) == 0
    assert dry.json()["request"] in capsys.readouterr().out
    assert apiserver.get("pytorchjobs", "dry", NAMESPACE) is None


def test_validation_errors_are_the_clis_one_line_and_create_nothing(
    api, apiserver, trainstack, capsys
):
    bad = ["model=llama9", "trainer.max_steps=-3", "compute.nodes=0"]
    for override in bad:
        response = api.client.post("/v1/runs", json=api.run_request("bad1", overrides=[override]))
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert "\n" not in detail
        capsys.readouterr()
        assert trainstack("launch", "run_id=bad1", override, launch=True) == 2
        cli_line = capsys.readouterr().err.strip().splitlines()[-1]
        assert cli_line == f"trainstack launch: {detail}"
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    assert apiserver.list("configmaps", NAMESPACE) == []


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ('{"run_id": "x", ', 400, "body: malformed JSON"),
        (
            '{"run_id": "x", "colour": "red"}',
            422,
            "colour: unknown field; allowed: overrides, run_id",
        ),
        ('{"nodes": "four"}', 422, "nodes: Input should be a valid integer"),
        ('{"nodes": 0}', 422, "nodes: Input should be greater than or equal to 1"),
        ('{"trainer": {"lr": [1, 2]}}', 422, "trainer.lr"),
        ('["model=tiny"]', 422, "body: Input should be a valid dictionary"),
        ('{"overrides": ["backend=local"]}', 422, "backend: not settable by a request"),
        ('{"overrides": ["+cluster.kubeconfig=/etc/x"]}', 422, "cluster.kubeconfig: not settable"),
    ],
)
def test_malformed_requests_are_refused_with_one_line(api, apiserver, body, status, fragment):
    response = api.client.post(
        "/v1/runs", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text
    assert fragment in response.json()["detail"] and "\n" not in response.json()["detail"]
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_huge_bodies_are_413_by_length_and_when_streamed(api):
    from jobs.api.app import MAX_BODY_BYTES

    huge = json.dumps({"overrides": ["x=" + "a" * MAX_BODY_BYTES]})
    assert api.client.post("/v1/runs", content=huge).status_code == 413

    def chunks():  # no Content-Length: the limit is counted as the body arrives
        yield b'{"overrides": ["'
        for _ in range(MAX_BODY_BYTES // 4096 + 2):
            yield b"a" * 4096
        yield b'"]}'

    response = api.client.post("/v1/runs", content=chunks())
    assert response.status_code == 413 and "over" in response.json()["detail"]


def test_unknown_runs_are_404_everywhere(api):
    for method, path in (
        ("GET", "/v1/runs/nope"),
        ("GET", "/v1/runs/nope/metrics"),
        ("GET", "/v1/runs/nope/logs"),
        ("DELETE", "/v1/runs/nope"),
    ):
        response = api.client.request(method, path)
        assert response.status_code == 404, (method, path)
        assert response.json()["detail"] == f"run 'nope': no such run in namespace {NAMESPACE}"


def test_logs_whole_followed_and_by_rank(api, apiserver):
    apiserver.operator.plans["lg1"] = [JobPlan(steps=6, step_seconds=0.1)]
    assert api.client.post("/v1/runs", json=api.run_request("lg1")).status_code == 201
    wait_for(lambda: api.client.get("/v1/runs/lg1").status_code == 200)
    with api.client.stream("GET", "/v1/runs/lg1/logs?follow=true") as stream:
        lines = [line for line in stream.iter_lines() if line]
    assert any("step 6 loss" in line for line in lines), lines
    assert "[trainstack] lg1: Succeeded" in lines[-1]
    # Nothing of the follow outlives it (see test_api_follow.py for followers who hang up).
    wait_for(lambda: api.service.follows.active == 0 and apiserver.open_streams == 0)
    whole = api.client.get("/v1/runs/lg1/logs?rank=0")
    assert whole.status_code == 200 and "step 6 loss" in whole.text
    out_of_range = api.client.get("/v1/runs/lg1/logs?rank=1")
    assert out_of_range.status_code == 400 and "out of range" in out_of_range.json()["detail"]
    assert api.client.get("/v1/runs/lg1/logs?rank=-1").status_code == 422


def test_cancel_is_idempotent(api, apiserver):
    apiserver.operator.plans["c1"] = [JobPlan(hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request("c1")).status_code == 201
    wait_for(lambda: api.client.get("/v1/runs/c1").json()["state"] == "running")
    first = api.client.delete("/v1/runs/c1")
    assert first.status_code == 202 and first.json()["outcome"] == "cancel requested"
    wait_for(lambda: api.client.get("/v1/runs/c1").json()["state"] == "cancelled")
    again = api.client.delete("/v1/runs/c1")
    assert again.status_code == 202 and again.json()["outcome"] == "already cancelled"


def test_sweeps_list_filters_and_all_or_nothing(api, apiserver):
    request = {
        "overrides": [
            f"compute={GPU_TYPE}",
            f"job.image={IMAGE}",
            "trainer.lr=1e-3,3e-3",
        ],
        "sweep_id": "sw1",
    }
    bad = {**request, "overrides": [*request["overrides"], "trainer.max_steps=10,-1"]}
    refused = api.client.post("/v1/sweeps", json=bad)
    assert refused.status_code == 422 and refused.json()["detail"].startswith("sweep point ")
    assert apiserver.list("pytorchjobs", NAMESPACE) == []

    response = api.client.post("/v1/sweeps", json=request)
    assert response.status_code == 201, response.text
    runs = response.json()["runs"]
    assert [r["run_id"] for r in runs] == ["sw1-0", "sw1-1"]
    assert {r["outcome"] for r in runs} == {"created"}
    listed = api.client.get("/v1/runs", params={"sweep": "sw1"}).json()["runs"]
    assert sorted(r["run_id"] for r in listed) == ["sw1-0", "sw1-1"]
    assert api.client.get("/v1/runs", params={"sweep": "other"}).json()["runs"] == []
    wait_for(lambda: len(api.client.get("/v1/runs?state=succeeded").json()["runs"]) == 2)
    bad_state = api.client.get("/v1/runs?state=sleeping")
    assert bad_state.status_code == 422 and "allowed: pending" in bad_state.json()["detail"]


def test_metrics_are_the_run_dirs_lines_with_a_step(api, apiserver):
    apiserver.operator.plans["m1"] = [JobPlan(hold=True)]
    logs = api.runs_root / "m1" / "logs"
    logs.mkdir(parents=True)
    (api.runs_root / "m1" / "config.yaml").write_text("trainer:\n  max_steps: 60\n")
    assert api.client.post("/v1/runs", json=api.run_request("m1")).status_code == 201
    lines = [{"step": s, "loss": 3.0 / s, "tokens_seen": 512 * s} for s in (10, 20, 30)]
    text = "\n".join(json.dumps(r) for r in lines)
    (logs / "metrics.jsonl").write_text(text + '\n{"note": "no step"}\n{"step": 4')
    body = api.client.get("/v1/runs/m1/metrics").json()
    assert body["records"] == lines
    later = api.client.get("/v1/runs/m1/metrics?since_step=10").json()["records"]
    assert [r["step"] for r in later] == [20, 30]
    api.service.snapshot.invalidate()
    run = api.client.get("/v1/runs/m1").json()
    assert run["last_step"] == 30 and run["max_steps"] == 60 and run["progress"] == 0.5
    assert run["last_loss"] == pytest.approx(0.1)
