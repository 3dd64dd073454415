"""The service as the stack deploys it (infra.training_api.serve_args): its jobs stay in the
stack's Kueue queue, and a request cannot name another."""

from __future__ import annotations

import pytest

from testing_support.k8s.fake_kueue import QUEUE_LABEL
from tests.api.conftest import NAMESPACE, deployed_overrides, start_api


@pytest.fixture
def queued_api(kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    server, handle = start_api(kubeconfig, token_dir, tmp_path / "runs", queue="team-a")
    yield handle
    handle.client.close()
    server.stop()


def test_the_deployed_arguments_lock_queue_runtimes_and_preflight():
    overrides = deployed_overrides(queue="team-a")
    assert "backend.preflight=false" in overrides and "job.queue='team-a'" in overrides
    assert "job.queue=null" in deployed_overrides()  # no Kueue: still locked, to none
    assert any(o.startswith("cluster.node_groups=[{name:") for o in overrides)


def test_jobs_go_to_the_stacks_queue_and_no_other(queued_api, apiserver):
    api = queued_api
    created = api.client.post("/v1/runs", json=api.run_request("q1"))
    assert created.status_code == 201, created.text
    job = apiserver.get("pytorchjobs", "q1", NAMESPACE)
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    for override in ("job.queue=other-team-queue", "job.queue=null", "~job.queue"):
        response = api.client.post("/v1/runs", json=api.run_request("q2", overrides=[override]))
        assert response.status_code == 422, (override, response.text)
        assert response.json()["detail"] == "job.queue: set by the service, not by a request"
    sweep = {"overrides": ["job.queue=a,b"]}
    assert api.client.post("/v1/sweeps", json=sweep).status_code == 422
    assert apiserver.get("pytorchjobs", "q2", NAMESPACE) is None


def test_without_kueue_a_request_names_no_queue(api, apiserver):
    response = api.client.post("/v1/runs", json=api.run_request("q3", overrides=["job.queue=x"]))
    assert response.status_code == 422
    assert response.json()["detail"] == "job.queue: set by the service, not by a request"
    assert apiserver.get("pytorchjobs", "q3", NAMESPACE) is None
