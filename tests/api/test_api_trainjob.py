"""The Training API on a cluster that runs Kubeflow Trainer (the service's stack says
job.api=trainjob): runs are TrainJobs, listed, read, logged and cancelled like PyTorchJobs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testing_support.k8s.fake_trainer import TrainPlan
from tests.api.conftest import GPU_TYPE, NAMESPACE, Api, start_api
from tests.api.test_api_runs import wait_for


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


def test_a_queued_run_cancelled_through_the_api_stops_for_good(
    kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch, apiserver
):
    """Under Kueue a suspend alone is undone (Kueue un-suspends a job whose Workload is
    admitted: kubernetes-sigs/kueue v0.19.2, pkg/controller/jobframework/reconciler.go);
    DELETE deactivates the run's Workload, and the API says `cancelled`."""
    from testing_support.k8s.fake_kueue import FakeKueue

    kueue = FakeKueue(apiserver)
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"name": "training"}}
    apiserver.put("localqueues", queue | {"spec": {"clusterQueue": "trainstack"}}, NAMESPACE)
    quota = {"cpu": "1000", "memory": "10000Gi", "nvidia.com/gpu": "64"}
    quota |= {"vpc.amazonaws.com/efa": "64", "hugepages-2Mi": "100000Mi"}
    resources = [{"name": name, "nominalQuota": amount} for name, amount in quota.items()]
    flavors = [{"name": "p4d", "resources": resources}]
    apiserver.put(
        "clusterqueues",
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"name": "trainstack"}}
        | {"spec": {"resourceGroups": [{"flavors": flavors}]}},
    )
    monkeypatch.chdir(tmp_path)
    server, api = start_api(
        kubeconfig, token_dir, tmp_path / "runs", ("job.queue=training",), job_api="trainjob"
    )
    try:
        apiserver.trainer.plans["ta3"] = [TrainPlan(hold=True)]
        created = api.client.post("/v1/runs", json=api.run_request("ta3"))
        assert created.status_code == 201, created.text
        kueue.admit("ta3")
        wait_for(lambda: api.client.get("/v1/runs/ta3").json()["state"] == "running")
        assert api.client.delete("/v1/runs/ta3").status_code == 202
        wait_for(lambda: api.client.get("/v1/runs/ta3").json()["state"] == "cancelled")
        kueue.admit("ta3")  # an inactive Workload is never admitted again
        workload = apiserver.get("workloads", kueue.workload_name("ta3"), NAMESPACE)
        assert workload["spec"]["active"] is False
        assert apiserver.get("trainjobs", "ta3", NAMESPACE)["spec"]["suspend"] is True
        assert api.client.get("/v1/runs/ta3").json()["state"] == "cancelled"
        runs = {r["run_id"]: r["state"] for r in api.client.get("/v1/runs").json()["runs"]}
        assert runs["ta3"] == "cancelled"
    finally:
        api.client.close()
        server.stop()


def test_the_deployed_service_checks_the_runtime_without_its_preflight(trainjob_api, apiserver):
    """As deployed (backend.preflight=false: the Role reads no cluster-scoped runtimes), the
    runtime is checked by validation against the stack's node groups, on every path: a run,
    a dry run, a sweep point."""
    api = trainjob_api
    assert api.service.backend.run_preflight is False  # infra's arguments, not a copy
    for runtime in ("admin-privileged", "trainstack-other-group"):
        run = api.run_request("ta3", overrides=[f"job.runtime={runtime}"])
        for dryrun in ("true", "false"):
            response = api.client.post("/v1/runs", json=run, params={"dryrun": dryrun})
            assert response.status_code == 422, response.text
            assert "is not one of trainstack's" in response.json()["detail"]
        sweep = {"overrides": [f"compute={GPU_TYPE}", f"job.runtime={runtime}", "seed=1,2"]}
        response = api.client.post("/v1/sweeps", json=sweep)
        assert response.status_code == 422 and "is not one of trainstack's" in response.text
    assert apiserver.list("trainjobs", NAMESPACE) == []
    ours = api.run_request("ta3", overrides=["job.runtime=trainstack-p4d-24xlarge"])
    assert api.client.post("/v1/runs", json=ours).status_code == 201
