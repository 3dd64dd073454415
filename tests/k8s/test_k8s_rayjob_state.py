"""How the kubernetes backend reads a RayJob: KubeRay's jobDeploymentStatus and the Ray job's
status as trainstack's states, its end time and failure line, its one log (the submitter
Job's newest pod, whatever the node count) and its expiry. KubeRay's own statuses are those of
ray-project/kuberay ray-operator/v1.6.2, apis/ray/v1/rayjob_types.go; the real operator's
walk through them is tests/e2e/test_e2e_rayjob.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from jobs.backends.base import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED, NoLogs
from jobs.backends.kubernetes import backend
from jobs.backends.kubernetes.client import state
from jobs.backends.kubernetes.client.api import ClusterError
from jobs.backends.kubernetes.client.kinds import BATCH_JOB_NAME_LABEL, RAYJOB
from jobs.backends.kubernetes.client.watch import rank_pod, rank_pod_label
from jobs.backends.kubernetes.run_status import to_status
from jobs.backends.kubernetes.submitting import ClusterSettings


def rayjob(deployment: str = "", job_status: str = "", **extra) -> dict:
    status = {"jobDeploymentStatus": deployment, "jobStatus": job_status, **extra}
    return {
        "apiVersion": RAYJOB.api_version,
        "kind": RAYJOB.kind,
        "metadata": {"name": "r1", "uid": "u1", "annotations": {}, "labels": {}},
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": {}}},
                "workerGroupSpecs": [{"groupName": "workers", "replicas": 3, "template": {}}],
            }
        },
        "status": status,
    }


def cancelled(job: dict) -> dict:
    job["metadata"]["annotations"][state.CANCELLED_ANNOTATION] = "2026-01-01T00:00:00Z"
    return job


@pytest.mark.parametrize(
    ("deployment", "job_status", "expected"),
    [
        ("", "", "Created"),
        ("Initializing", "", "Created"),
        ("Waiting", "", "Created"),
        ("Running", "PENDING", "Running"),
        ("Running", "RUNNING", "Running"),
        ("Retrying", "FAILED", "Restarting"),
        ("Complete", "SUCCEEDED", "Succeeded"),
        ("Complete", "STOPPED", "Failed"),
        ("Failed", "FAILED", "Failed"),
        ("Failed", "", "Failed"),  # the submitter failed, or the deadline passed
        ("ValidationFailed", "", "Failed"),
        ("Suspending", "", "Suspended"),
        ("Suspended", "", "Suspended"),
    ],
)
def test_kuberays_statuses_are_trainstacks_states(deployment, job_status, expected):
    assert state.job_state(rayjob(deployment, job_status)) == expected


def test_suspended_by_kueue_is_queued_and_by_cancel_is_cancelled():
    waiting = rayjob("Suspended")
    waiting["spec"]["suspend"] = True
    assert to_status(waiting).state == QUEUED
    assert to_status(cancelled(waiting)).state == CANCELLED
    # KubeRay stops a cancelled job's Ray cluster; a Ray job it STOPPED ends Cancelled.
    assert to_status(cancelled(rayjob("Complete", "STOPPED"))).state == CANCELLED
    # Before KubeRay has seen the suspend, the spec decides.
    running = rayjob("Running", "RUNNING")
    running["spec"]["suspend"] = True
    assert state.job_state(running) == "Suspended"


def test_end_time_failure_line_and_states_as_runs_prints_them():
    done = rayjob("Complete", "SUCCEEDED", endTime="2026-01-01T01:00:00Z")
    assert state.finished_at(done) == "2026-01-01T01:00:00Z"
    assert to_status(done).state == SUCCEEDED
    assert state.finished_at(rayjob("Running", "RUNNING", endTime="x")) is None
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message="Job entrypoint command failed")
    status = to_status(failed)
    assert (status.state, status.message) == (FAILED, "AppFailed: Job entrypoint command failed")
    assert to_status(rayjob("Running", "RUNNING")).state == RUNNING
    assert state.nodes(done) == 4  # the head and three workers


def test_a_rayjob_has_one_log_its_drivers():
    job = rayjob("Running", "RUNNING")
    assert to_status(job).log_ranks == 1
    state.check_rank(job, 0)
    with pytest.raises(ValueError, match=r"--rank 1: a RayJob's log is its driver's"):
        state.check_rank(job, 1)
    assert rank_pod_label(job, 0) == "r1's submitter"


def test_the_log_is_the_newest_submitter_pods():
    asked = []

    def list_pods(namespace, label_selector):
        asked.append(label_selector)
        return {
            "items": [
                {"metadata": {"name": "r1-aaaaa", "creationTimestamp": "2026-01-01T00:00:00Z"}},
                {"metadata": {"name": "r1-bbbbb", "creationTimestamp": "2026-01-01T00:05:00Z"}},
                {
                    "metadata": {
                        "name": "r1-ccccc",
                        "creationTimestamp": "2026-01-01T00:09:00Z",
                        "deletionTimestamp": "2026-01-01T00:10:00Z",
                    }
                },
            ]
        }

    cluster = SimpleNamespace(
        namespace="training",
        call=lambda _what, fn, *args, **kwargs: fn(*args, **kwargs),
        core=SimpleNamespace(
            list_namespaced_pod=list_pods,
            api_client=SimpleNamespace(sanitize_for_serialization=lambda x: x),
        ),
    )
    pod = rank_pod(cluster, rayjob("Running", "RUNNING"), 0)
    assert pod is not None and pod["metadata"]["name"] == "r1-bbbbb"
    assert asked == [f"{BATCH_JOB_NAME_LABEL}=r1"]
    assert RAYJOB.log_container == "ray-job-submitter"


def test_a_finished_or_cancelled_rayjob_expires_after_a_week():
    """shutdownAfterJobFinishes deletes the Ray cluster, never the RayJob: trainstack does."""
    now = datetime(2026, 2, 1, tzinfo=UTC)
    old = (now - timedelta(days=8)).strftime("%Y-%m-%dT%H:%M:%SZ")
    recent = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert state.expired(rayjob("Complete", "SUCCEEDED", endTime=old), now)
    assert not state.expired(rayjob("Complete", "SUCCEEDED", endTime=recent), now)
    assert not state.expired(rayjob("Running", "RUNNING", endTime=old), now)
    gone = cancelled(rayjob("Suspended"))
    gone["metadata"]["annotations"][state.CANCELLED_ANNOTATION] = old
    assert state.expired(gone, now)


def test_a_kind_the_stack_did_not_install_is_skipped_when_we_may_not_read_it():
    """`trainstack:rayJobs: false`: the Training API's Role names no rayjobs, so the API server
    refuses them (403). A run looked up, or the runs listed, go on with the kinds we may
    read; the configured kind's refusal is still an error."""

    def refused(kind):
        try:
            raise ApiException(status=403, reason="Forbidden")
        except ApiException as cause:
            raise ClusterError(f"get {kind.kind}: Forbidden") from cause

    class Cluster:
        def get_job(self, name, kind):
            if kind is RAYJOB:
                refused(kind)
            return None

        def list_jobs(self, selector, kind):
            if kind is RAYJOB:
                refused(kind)
            return [{"metadata": {"name": f"a-{kind.api}"}}]

    reader = backend.KubernetesBackend(ClusterSettings(None, None, "training"))
    reader._cluster = Cluster()
    assert reader.find("r1") is None
    assert [j["metadata"]["name"] for j in reader.job_objects("")] == [
        "a-trainjob",
        "a-pytorchjob",
    ]
    configured = backend.KubernetesBackend(
        ClusterSettings(None, None, "training", job_api="rayjob")
    )
    configured._cluster = Cluster()
    with pytest.raises(ClusterError, match="Forbidden"):
        configured.find("r1")
    with pytest.raises(ClusterError, match="Forbidden"):
        configured.job_objects("")


def test_a_gone_rayjobs_log_is_its_submitter_pods_archive(monkeypatch):
    """Once the RayJob (and its pods) expired, the driver's log is read from CloudWatch Logs:
    the newest stream of a pod `<run id>-<random>`, the submitter's container."""
    asked = []

    def by_prefix(region, group, prefix, container):
        asked.append((prefix, container))

    monkeypatch.setattr(backend, "archived_log_by_prefix", by_prefix)
    reader = backend.KubernetesBackend(ClusterSettings(None, None, "training", log_group="logs"))
    with pytest.raises(NoLogs):
        reader.archived_logs("r1", 0, RAYJOB)
    assert asked == [("r1-", "ray-job-submitter")]
