"""Submitting through the real client against the fake apiserver: idempotency and cleanup."""

from __future__ import annotations

import pytest

from jobs.backends.kubernetes.client.api import ClusterError
from jobs.backends.kubernetes.client.state import RETRIES_ANNOTATION
from jobs.backends.kubernetes.client.submit import ALREADY_ACTIVE, CREATED, RESUMED, submit
from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_operator import JobPlan


def manifests(name: str) -> list[dict]:
    return [config_map(name), pytorch_job(name)]


def test_submit_creates_config_map_owned_by_the_job(apiserver, cluster):
    result = submit(cluster, manifests("r1"))
    assert result.outcome == CREATED
    owner = apiserver.get("configmaps", "r1-config", NAMESPACE)["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o["uid"]) for o in owner] == [
        ("PyTorchJob", "r1", result.job["metadata"]["uid"])
    ]
    # ConfigMap first, job second.
    posts = [p for m, p in apiserver.requests if m == "POST"]
    assert "configmaps" in posts[0] and "pytorchjobs" in posts[1]
    # Deleting the job cascades to the ConfigMap and the pods.
    apiserver.operator.wait_idle()
    apiserver.remove("pytorchjobs", "r1", NAMESPACE)
    assert apiserver.get("configmaps", "r1-config", NAMESPACE) is None
    assert apiserver.list("pods", NAMESPACE) == []


def test_resubmitting_an_active_run_creates_nothing(apiserver, cluster):
    apiserver.operator.plans["r1"] = [JobPlan(hold=True)]
    first = submit(cluster, manifests("r1"))
    second = submit(cluster, manifests("r1"))
    assert (first.outcome, second.outcome) == (CREATED, ALREADY_ACTIVE)
    assert apiserver.operator.created["r1"] == 1
    assert second.job["metadata"]["uid"] == first.job["metadata"]["uid"]


def test_conflict_on_create_reports_the_concurrent_submission(apiserver, cluster):
    apiserver.operator.plans["r1"] = [JobPlan(hold=True)]
    apiserver.faults.conflict_on_create.add("r1")  # someone else creates r1 first
    result = submit(cluster, manifests("r1"))
    assert result.outcome == ALREADY_ACTIVE
    assert apiserver.operator.created["r1"] == 1
    job_uid = apiserver.get("pytorchjobs", "r1", NAMESPACE)["metadata"]["uid"]
    owner = apiserver.get("configmaps", "r1-config", NAMESPACE)["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owner] == [job_uid]


def test_finished_run_is_resumed_under_the_same_name(apiserver, cluster):
    first = submit(cluster, manifests("r1"))
    apiserver.operator.wait_idle()
    assert apiserver.get("pytorchjobs", "r1", NAMESPACE)["status"]["conditions"][-1]["type"] == (
        "Succeeded"
    )
    second = submit(cluster, manifests("r1"), retries=1)
    assert second.outcome == RESUMED
    assert second.job["metadata"]["uid"] != first.job["metadata"]["uid"]
    assert second.job["metadata"]["annotations"][RETRIES_ANNOTATION] == "1"
    assert len(apiserver.list("pytorchjobs", NAMESPACE)) == 1
    owner = apiserver.get("configmaps", "r1-config", NAMESPACE)["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owner] == [second.job["metadata"]["uid"]]


def test_failed_job_create_leaves_nothing_behind(apiserver, cluster):
    apiserver.faults.reject_create["r1"] = 422  # e.g. the operator's webhook refuses it
    with pytest.raises(ClusterError) as caught:
        submit(cluster, manifests("r1"))
    message = str(caught.value)
    assert message == "create PyTorchJob training/r1 failed: 422 Unprocessable Entity: injected"
    assert apiserver.count("POST", "/configmaps") == 1  # it was created, then removed
    assert apiserver.get("configmaps", "r1-config", NAMESPACE) is None
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
