"""The Training API on a cluster that runs Kubeflow Trainer (the service's stack says
job.api=trainjob): runs are TrainJobs, listed, read, logged and cancelled like PyTorchJobs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import GPU_TYPE, NAMESPACE, Api, start_api
from tests.api.test_api_runs import wait_for
from tests.k8s.fake_trainer import TrainPlan


@pytest.fixture
def trainjob_api(
    kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch
) -> Iterator[Api]:
    monkeypatch.chdir(tmp_path)
    server, handle = start_api(kubeconfig, token_dir, tmp_path / "runs", job_api="trainjob")
    yield handle
    handle.client.close()
    server.stop()


def test_runs_are_trainjobs_read_logged_and_cancelled(trainjob_api, apiserver):
    api = trainjob_api
    apiserver.trainer.plans["ta1"] = [TrainPlan(hold=True)]
    created = api.client.post("/v1/runs", json=api.run_request("ta1"))
    assert created.status_code == 201, created.text
    assert created.json()["plan"]["instance_type"] == GPU_TYPE
    job = apiserver.get("trainjobs", "ta1", NAMESPACE)
    assert job["spec"]["runtimeRef"]["name"] == "trainstack-p4d-24xlarge"
    assert apiserver.get("pytorchjobs", "ta1", NAMESPACE) is None
    again = api.client.post("/v1/runs", json=api.run_request("ta1"))
    assert again.status_code == 200 and again.json()["outcome"] == "already active"
    assert apiserver.trainer.created["ta1"] == 1

    run = wait_for(lambda: (r := api.client.get("/v1/runs/ta1").json())["state"] == "running" and r)
    assert run["nodes"] == 1 and run["hourly_usd"] > 0  # instance type from the TrainJob
    assert "ta1" in {r["run_id"] for r in api.client.get("/v1/runs").json()["runs"]}
    wait_for(lambda: "step 1" in api.client.get("/v1/runs/ta1/logs?rank=0").text)
    out_of_range = api.client.get("/v1/runs/ta1/logs?rank=1")
    assert out_of_range.status_code == 400 and "out of range" in out_of_range.json()["detail"]

    assert api.client.delete("/v1/runs/ta1").status_code == 202
    wait_for(lambda: api.client.get("/v1/runs/ta1").json()["state"] == "cancelled")
    assert apiserver.get("trainjobs", "ta1", NAMESPACE)["spec"]["suspend"] is True


def test_a_request_runs_only_on_trainstacks_runtimes(trainjob_api, apiserver):
    """job.runtime naming another ClusterTrainingRuntime (an admin's, with any pod template)
    is refused like a missing one: the answer does not tell which runtimes exist."""
    api = trainjob_api
    foreign = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "admin-privileged"},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {}}},
    }
    apiserver.put("clustertrainingruntimes", foreign)
    answers = []
    for runtime in ("admin-privileged", "nothing-here"):
        request = api.run_request("ta2", overrides=[f"job.runtime={runtime}"])
        response = api.client.post("/v1/runs", json=request)
        assert response.status_code == 422, response.text
        answers.append(response.json()["detail"].replace(runtime, "NAME"))
    assert answers[0] == answers[1] and "is not one of trainstack's" in answers[0]
    assert apiserver.list("trainjobs", NAMESPACE) == []
    assert apiserver.list("configmaps", NAMESPACE) == []


def test_a_run_id_too_long_for_jobsets_pod_names_is_refused_before_anything_is_written(
    trainjob_api, apiserver
):
    """A TrainJob's JobSet refuses names whose pods pass 63 characters (jobs/naming.py):
    49 characters on one node is one too many. Refused 4xx in one line; nothing created."""
    api = trainjob_api
    run_id = "a" * 49
    refused = api.client.post("/v1/runs", json=api.run_request(run_id))
    assert refused.status_code in (400, 422), refused.text
    detail = refused.json()["detail"]
    assert "run_id" in detail and "at most 48 characters" in detail and "\n" not in detail
    assert apiserver.get("trainjobs", run_id, NAMESPACE) is None
    assert apiserver.get("configmaps", f"{run_id}-config", NAMESPACE) is None
    assert not (api.runs_root / run_id).exists()
