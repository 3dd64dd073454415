"""The fake apiserver behaves like the real one where the backend relies on it, and the
backend copes: updates need the current resourceVersion (409 on a stale one), Foreground
deletion keeps the object (deletionTimestamp) until its dependents are gone, watches send
BOOKMARKs when asked, pods carry containerStatuses."""

from __future__ import annotations

import time

import pytest
from kubernetes.client.exceptions import ApiException

from jobs.backends.kubernetes.client.state import job_state
from jobs.backends.kubernetes.client.submit import ALREADY_ACTIVE, RESUMED, submit
from jobs.backends.kubernetes.client.watch import wait_for_end
from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_operator import JobPlan


def test_updates_need_the_current_resource_version(apiserver, cluster):
    apiserver.put("configmaps", config_map("u1"), NAMESPACE)
    stale = apiserver.get("configmaps", "u1-config", NAMESPACE)
    apiserver.update("configmaps", "u1-config", NAMESPACE, lambda o: o.update(data={"a": "1"}))
    with pytest.raises(ApiException) as conflict:
        cluster.core.replace_namespaced_config_map("u1-config", NAMESPACE, stale)
    assert conflict.value.status == 409
    stale["metadata"].pop("resourceVersion")
    with pytest.raises(ApiException) as invalid:
        cluster.core.replace_namespaced_config_map("u1-config", NAMESPACE, stale)
    assert invalid.value.status == 422


def test_a_leftover_config_map_is_replaced_with_its_resource_version(apiserver, cluster):
    # Today's submit replaced it without one: a real API server answers 422.
    leftover = config_map("u2")
    leftover["data"] = {"config.yaml": "old\n"}
    apiserver.put("configmaps", leftover, NAMESPACE)
    assert submit(cluster, [config_map("u2"), pytorch_job("u2")]).outcome == "created"
    assert apiserver.get("configmaps", "u2-config", NAMESPACE)["data"] == {
        "config.yaml": "seed: 0\n"
    }


def test_a_config_map_changed_between_read_and_replace_is_read_again(apiserver, cluster):
    # A concurrent writer bumps the resourceVersion after submit read it: 409, read, retry.
    apiserver.put("configmaps", config_map("u6"), NAMESPACE)
    read = cluster.core.read_namespaced_config_map
    reads = []

    def read_then_race(name, namespace, **options):
        current = read(name, namespace, **options)
        if len(reads) == 1:  # the first read is submit's ownership check, the second replace's
            touch = lambda o: o.update(data={"config.yaml": "theirs\n"})  # noqa: E731
            apiserver.update("configmaps", name, namespace, touch)
        reads.append(current.metadata.resource_version)
        return current

    cluster.core.read_namespaced_config_map = read_then_race
    assert submit(cluster, [config_map("u6"), pytorch_job("u6")]).outcome == "created"
    assert len(reads) == 3 and apiserver.count("PUT", "/configmaps/u6-config") == 2
    stored = apiserver.get("configmaps", "u6-config", NAMESPACE)
    assert stored["data"] == {"config.yaml": "seed: 0\n"}


def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(apiserver, cluster):
    apiserver.foreground_delay_s = 0.5
    submit(cluster, [config_map("u3"), pytorch_job("u3")])
    apiserver.operator.wait_idle()
    seen_terminating = []
    original = cluster.get_job

    def get_job(name, *kind):
        job = original(name, *kind)
        if job is not None and job["metadata"].get("deletionTimestamp"):
            seen_terminating.append(job["metadata"]["finalizers"])
        return job

    cluster.get_job = get_job
    # Resubmitting a finished run deletes it (Foreground) and waits until it is really gone.
    assert submit(cluster, [config_map("u3"), pytorch_job("u3")]).outcome == RESUMED
    assert seen_terminating and seen_terminating[0] == ["foregroundDeletion"]
    assert apiserver.operator.created["u3"] == 2


def test_wait_asks_for_bookmarks_and_is_not_fooled_by_them(apiserver, cluster):
    apiserver.operator.default = JobPlan(steps=6, step_seconds=0.25)
    submit(cluster, [config_map("u4"), pytorch_job("u4")])
    seen: list[str] = []
    job = wait_for_end(cluster, "u4", on_state=lambda state, _: seen.append(state))
    assert apiserver.bookmarks_sent > 0
    assert job_state(job) == "Succeeded"
    assert "Pending" not in seen[1:]  # a bookmark has no status: it is not a state


def test_pods_carry_container_statuses(apiserver, cluster):
    apiserver.operator.default = JobPlan(hold=True)
    submit(cluster, [config_map("u5"), pytorch_job("u5", workers=0)])
    deadline = time.monotonic() + 5
    while True:
        pod = apiserver.get("pods", "u5-master-0", NAMESPACE)
        if pod and pod["status"]["phase"] == "Running":
            break
        assert time.monotonic() < deadline
        time.sleep(0.02)
    (status,) = pod["status"]["containerStatuses"]
    assert status["name"] == "pytorch" and "running" in status["state"]
    again = submit(cluster, [config_map("u5"), pytorch_job("u5", workers=0)])
    assert again.outcome == ALREADY_ACTIVE
