"""Jobs under Kueue against the fake apiserver: created suspended with the queue label, shown
`queued` with Kueue's reason (not finished, not cancelled), followed by --wait through
queueing and preemption, never un-suspended by trainstack, never resubmitted while held;
a cancelled (suspended) run is deleted once its TTL has passed."""

from __future__ import annotations

import threading
import time

import pytest

from jobs.backends.base import CANCELLED, QUEUED, SUCCEEDED
from jobs.backends.kubernetes.backend import KubernetesBackend
from jobs.backends.kubernetes.client.state import CANCELLED_ANNOTATION, is_final, job_state
from jobs.backends.kubernetes.client.submit import ALREADY_ACTIVE, submit
from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_kueue import PENDING_MESSAGE, QUEUE_LABEL, FakeKueue
from testing_support.k8s.fake_operator import JobPlan


@pytest.fixture
def kueue(apiserver) -> FakeKueue:
    return FakeKueue(apiserver)


def queued_job(name: str) -> list[dict]:
    job = pytorch_job(name, labels={QUEUE_LABEL: "team-a"})
    job["spec"]["runPolicy"] = {"suspend": True, "ttlSecondsAfterFinished": 60}
    return [config_map(name), job]


def backend_for(kubeconfig) -> KubernetesBackend:
    from jobs.backends.kubernetes.submitting import ClusterSettings

    return KubernetesBackend(
        ClusterSettings(str(kubeconfig), "fake", NAMESPACE, job_api="pytorchjob")
    )


def client_patches(apiserver, name: str) -> int:
    return apiserver.count("PATCH", f"/pytorchjobs/{name}")


def test_launch_renders_a_suspended_job_with_queue_and_priority(trainstack, apiserver, kueue):
    args = ["job.queue=team-a", "job.priority=high", "--skip-preflight", "run_id=kq0"]
    assert trainstack("launch", *args, launch=True) == 0
    job = apiserver.get("pytorchjobs", "kq0", NAMESPACE)
    assert job["spec"]["runPolicy"]["suspend"] is True
    labels = job["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "team-a"
    assert labels["kueue.x-k8s.io/priority-class"] == "high"
    template = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in template["metadata"]["labels"])


def test_a_queued_job_is_queued_with_kueue_reason_and_wait_waits_for_admission(
    apiserver, kubeconfig, kueue, fast_retry, fast_restarts
):
    backend = backend_for(kubeconfig)
    submit(backend.cluster, queued_job("kq1"))
    status = backend.status("kq1")
    assert (status.state, status.finished) == (QUEUED, False)
    assert status.message == f"waiting in queue team-a: {PENDING_MESSAGE}"

    # --wait blocks through queueing (today: Suspended counted as final, it returned at once).
    result = {}
    waiter = threading.Thread(target=lambda: result.update(final=backend.wait("kq1", print)))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive()
    kueue.admit("kq1")
    waiter.join(20)
    assert result["final"].state == SUCCEEDED
    assert client_patches(apiserver, "kq1") == 0  # only Kueue ever un-suspended it
    assert apiserver.operator.created["kq1"] == 1


def test_a_preempted_job_is_not_finished_not_resubmitted_and_resumes_on_readmission(
    apiserver, kubeconfig, kueue, fast_retry, fast_restarts
):
    apiserver.operator.default = JobPlan(steps=30, step_seconds=0.05)
    backend = backend_for(kubeconfig)
    submit(backend.cluster, queued_job("kq2"))
    kueue.admit("kq2")
    result = {}
    waiter = threading.Thread(target=lambda: result.update(final=backend.wait("kq2", print)))
    waiter.start()
    time.sleep(0.3)
    kueue.preempt("kq2")  # pods deleted (SIGTERM: the trainer checkpoints)
    status = backend.status("kq2")
    assert status.state == QUEUED and status.message.startswith("in queue team-a after preempted")
    assert apiserver.list("pods", NAMESPACE) == []
    # Submitting it again (a user, a sweep re-run) sends nothing: Kueue holds it.
    again = submit(backend.cluster, queued_job("kq2"))
    assert again.outcome == ALREADY_ACTIVE
    assert waiter.is_alive()
    kueue.admit("kq2")
    waiter.join(20)
    assert result["final"].state == SUCCEEDED
    assert apiserver.operator.created["kq2"] == 1
    assert client_patches(apiserver, "kq2") == 0


def test_cancel_of_a_queued_job_is_final_and_its_ttl_deletes_it(
    apiserver, kubeconfig, kueue, fast_retry, fast_restarts
):
    backend = backend_for(kubeconfig)
    manifests = queued_job("kq3")
    manifests[1]["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "trainstack"
    submit(backend.cluster, manifests)
    backend.cancel("kq3")
    assert backend.status("kq3").state == CANCELLED
    assert [r.run_id for r in backend.list_runs()] == ["kq3"]  # within its TTL: kept
    # Cancelled two minutes ago, TTL 60 s: the next listing deletes it.
    apiserver.update(
        "pytorchjobs",
        "kq3",
        NAMESPACE,
        lambda j: j["metadata"]["annotations"].update(
            {CANCELLED_ANNOTATION: "2020-01-01T00:00:00Z"}
        ),
    )
    assert backend.list_runs() == []
    deadline = time.monotonic() + 5
    while apiserver.get("pytorchjobs", "kq3", NAMESPACE) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert apiserver.get("configmaps", "kq3-config", NAMESPACE) is None


def test_a_job_suspended_by_an_admin_is_not_finished():
    job = {"metadata": {"name": "x"}, "spec": {"runPolicy": {"suspend": True}}, "status": {}}
    assert job_state(job) == "Suspended"
    assert not is_final(job_state(job))  # the defect: Suspended counted as final
    # Also with the operator's Suspended condition (what it sets once it has seen the spec).
    job["status"]["conditions"] = [{"type": "Suspended", "status": "True"}]
    assert not is_final(job_state(job))
    job["metadata"]["annotations"] = {CANCELLED_ANNOTATION: "2026-11-23T00:00:00Z"}
    assert job_state(job) == "Cancelled"
    assert is_final(job_state(job))


def _workload(apiserver, kueue, name: str) -> dict:
    return apiserver.get("workloads", kueue.workload_name(name), NAMESPACE)


def test_cancel_of_an_admitted_job_stops_it_for_good_and_releases_its_quota(
    apiserver, kubeconfig, kueue, fast_retry, fast_restarts
):
    """Kueue un-suspends a job whose Workload is admitted (kubernetes-sigs/kueue v0.19.2,
    pkg/controller/jobframework/reconciler.go), so suspending it is no cancel: the Workload
    is deactivated (`spec.active: false`), Kueue evicts it (quota released) and suspends the
    job, and never admits it again. The job object (and the run dir) stays: `cancelled`."""
    apiserver.operator.default = JobPlan(steps=200, step_seconds=0.05)
    backend = backend_for(kubeconfig)
    manifests = queued_job("kq5")
    manifests[1]["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "trainstack"
    submit(backend.cluster, manifests)
    kueue.admit("kq5")
    deadline = time.monotonic() + 5
    while not apiserver.list("pods", NAMESPACE):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    backend.cancel("kq5")
    time.sleep(0.3)
    job = apiserver.get("pytorchjobs", "kq5", NAMESPACE)
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert apiserver.list("pods", NAMESPACE) == []
    workload = _workload(apiserver, kueue, "kq5")
    assert workload["spec"]["active"] is False
    conditions = {c["type"]: c for c in workload["status"]["conditions"]}
    assert conditions["QuotaReserved"]["status"] == "False"  # its quota is released
    assert conditions["Evicted"]["reason"] == "Deactivated"
    kueue.admit("kq5")  # Kueue never admits an inactive Workload
    assert apiserver.get("pytorchjobs", "kq5", NAMESPACE)["spec"]["runPolicy"]["suspend"]
    assert backend.status("kq5").state == CANCELLED
    assert [(r.run_id, r.state) for r in backend.list_runs()] == [("kq5", CANCELLED)]


def test_cancel_of_a_waiting_job_keeps_it_from_starting_once_admitted(
    apiserver, kubeconfig, kueue, fast_retry, fast_restarts
):
    backend = backend_for(kubeconfig)
    submit(backend.cluster, queued_job("kq6"))
    backend.cancel("kq6")
    kueue.admit("kq6")  # the quota frees up: it must not start
    time.sleep(0.2)
    assert apiserver.get("pytorchjobs", "kq6", NAMESPACE)["spec"]["runPolicy"]["suspend"]
    assert apiserver.list("pods", NAMESPACE) == []
    assert backend.status("kq6").state == CANCELLED


def test_cancel_of_an_admitted_trainjob_stops_it_for_good(
    apiserver, kubeconfig, kueue, fast_retry, fast_restarts, tmp_path
):
    from jobs.backends.kubernetes.submitting import ClusterSettings
    from testing_support.k8s.fake_trainer import TrainPlan
    from tests.k8s.test_k8s_trainjob import two_node_job

    apiserver.trainer.plans["kq7"] = [TrainPlan(hold=True)]
    backend = KubernetesBackend(ClusterSettings(str(kubeconfig), "fake", NAMESPACE))
    manifests = two_node_job("kq7", tmp_path)
    job = next(m for m in manifests if m["kind"] == "TrainJob")
    job["metadata"]["labels"][QUEUE_LABEL] = "team-a"
    job["spec"]["suspend"] = True
    submit(backend.cluster, manifests)
    kueue.admit("kq7")
    deadline = time.monotonic() + 5
    while not apiserver.list("pods", NAMESPACE):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    backend.cancel("kq7")
    time.sleep(0.3)
    assert apiserver.get("trainjobs", "kq7", NAMESPACE)["spec"]["suspend"] is True
    assert apiserver.list("pods", NAMESPACE) == []
    assert _workload(apiserver, kueue, "kq7")["spec"]["active"] is False
    assert backend.status("kq7").state == CANCELLED


def test_cancel_deletes_a_queued_job_whose_workload_cannot_be_deactivated(
    apiserver, kubeconfig, fast_retry, fast_restarts, monkeypatch
):
    """No Workload to deactivate (Kueue has not made one, or may not be asked): the job is
    deleted rather than left for Kueue to admit later."""
    from jobs.backends.kubernetes import backend as kubernetes

    monkeypatch.setattr(kubernetes, "WORKLOAD_WAIT_S", 1)
    backend = backend_for(kubeconfig)
    submit(backend.cluster, queued_job("kq8"))  # no FakeKueue here: no Workload ever
    backend.cancel("kq8")
    deadline = time.monotonic() + 5
    while apiserver.get("pytorchjobs", "kq8", NAMESPACE) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
