"""Kueue's queueing, preemption and trainstack's cancel, and how failures end, against the real
components. Each job takes both p5 nodes (the whole quota) unless it says otherwise.
"""

from __future__ import annotations

import pytest

from contract.config import EXIT_BAD_INPUT
from jobs.backends.kubernetes.runtimes import DEFAULT_MAX_RESTARTS
from tests.e2e.conftest import (
    JOBS,
    admitted,
    conditions,
    eventually,
    pods_of,
    remove_run,
    workload_of,
)

APIS = ["trainjob", "pytorchjob"]
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
LIMITS = {"trainjob": DEFAULT_MAX_RESTARTS, "pytorchjob": 1}
"""Restarts after a killed pod: a TrainJob's runtime's JobSet maxRestarts (the platform's
value, whatever `job.max_restarts` says), a PyTorchJob's `job.max_restarts` (its pods count
their own starts: trainer.pod_starts; launched with this value: one restart shows the limit)."""
ONE_NODE_APIS = ["trainjob", "pytorchjob"]
TWO_NODES = ("compute=p5.48xlarge", "compute.nodes=2")


def launch(cluster, api: str, run_id: str, *extra: str) -> None:
    cluster.launch(*TWO_NODES, f"job.api={api}", f"run_id={run_id}", *extra)


def running_pods(cluster, run_id: str, count: int) -> list[dict]:
    return eventually(
        lambda: (
            len(pods_of(cluster, run_id, "Running")) == count
            and pods_of(cluster, run_id, "Running")
        ),
        f"{count} running pods of {run_id}",
    )


def quota_reason(cluster, kind: str, run_id: str) -> dict:
    workload = eventually(lambda: workload_of(cluster, kind, run_id), f"{run_id}'s Workload")
    return conditions(workload).get("QuotaReserved", {})


@pytest.mark.parametrize("api", APIS)
def test_second_job_waits_with_kueues_reason_until_cancel_frees_quota(local_cluster, api):
    _, kind = JOBS[api]
    first, second = f"e2e-q1-{api[:3]}", f"e2e-q2-{api[:3]}"
    try:
        launch(local_cluster, api, first)
        eventually(lambda: admitted(local_cluster, kind, first), f"{first} admitted")
        launch(local_cluster, api, second)
        reason = eventually(
            lambda: quota_reason(local_cluster, kind, second).get("message"),
            f"Kueue's reason for holding {second}",
        )
        assert "insufficient unused quota" in reason, reason
        assert not admitted(local_cluster, kind, second)
        printed = local_cluster.trainstack("status", second, "stack=local", "backend=kubernetes")
        assert "insufficient unused quota" in printed, printed

        local_cluster.trainstack("cancel", first, "stack=local", "backend=kubernetes")
        eventually(lambda: admitted(local_cluster, kind, second), f"{second} admitted")
        running_pods(local_cluster, second, 2)
        assert not pods_of(local_cluster, first, "Running")
        assert (
            "cancelled"
            in local_cluster.trainstack(
                "status", first, "stack=local", "backend=kubernetes"
            ).lower()
        )
    finally:
        remove_run(local_cluster, first)
        remove_run(local_cluster, second)


@pytest.mark.parametrize("api", APIS)
def test_higher_priority_preempts_and_the_lower_resumes(local_cluster, api):
    _, kind = JOBS[api]
    low, high = f"e2e-lo-{api[:3]}", f"e2e-hi-{api[:3]}"
    try:
        launch(local_cluster, api, low, "job.priority=low")
        running_pods(local_cluster, low, 2)
        launch(local_cluster, api, high, "job.priority=high")
        eventually(lambda: admitted(local_cluster, kind, high), f"{high} admitted")
        evicted = conditions(workload_of(local_cluster, kind, low)).get("Evicted", {})
        assert evicted.get("reason") == "Preempted", evicted
        running_pods(local_cluster, high, 2)
        assert not pods_of(local_cluster, low, "Running")

        local_cluster.finish(high, 0)
        eventually(lambda: admitted(local_cluster, kind, low), f"{low} admitted again")
        running_pods(local_cluster, low, 2)
    finally:
        remove_run(local_cluster, low)
        remove_run(local_cluster, high)


def _job(cluster, api: str, run_id: str) -> dict:
    api_version, kind = JOBS[api]
    return cluster.get(api_version, kind, run_id)


def _jobset_restarts(cluster, api: str, run_id: str) -> int | None:
    """A TrainJob's JobSet's `status.restarts`; None for a PyTorchJob (no JobSet)."""
    if api != "trainjob":
        return None
    jobset = cluster.get(JOBSET_API, "JobSet", run_id)
    return int((jobset.get("status") or {}).get("restarts") or 0)


def _status(cluster, run_id: str) -> str:
    return cluster.trainstack("status", run_id, "stack=local", "backend=kubernetes")


def _launch_one_node(cluster, api: str, run_id: str) -> None:
    cluster.launch(
        "compute=p5.48xlarge",
        "compute.nodes=1",
        f"job.api={api}",
        f"job.max_restarts={LIMITS[api]}",
        f"run_id={run_id}",
    )


@pytest.mark.parametrize("api", ONE_NODE_APIS)
def test_exit_code_2_is_not_retried(local_cluster, api):
    """The runtime's pod failure policy (TrainJob) and the ExitCode restart policy
    (PyTorchJob) end the job at the first exit in 1-127: no new pod, no JobSet restart."""
    run_id = f"e2e-x2-{api[:3]}"
    try:
        _launch_one_node(local_cluster, api, run_id)
        running_pods(local_cluster, run_id, 1)
        local_cluster.finish(run_id, 2)
        eventually(lambda: "failed" in _status(local_cluster, run_id).lower(), f"{run_id} failed")
        failed = conditions(_job(local_cluster, api, run_id)).get("Failed", {})
        assert failed.get("status") == "True", failed
        if api == "trainjob":  # the FailJobSet rule, not maxRestarts
            assert failed.get("reason") == "FailJobSetFailurePolicyAction", failed
        assert _jobset_restarts(local_cluster, api, run_id) in (0, None)
        assert len(pods_of(local_cluster, run_id)) == 1, "a permanent exit code was retried"
    finally:
        remove_run(local_cluster, run_id)


@pytest.mark.parametrize("api", ONE_NODE_APIS)
def test_killed_pod_137_is_restarted_up_to_the_limit(local_cluster, api):
    """Exit 137 (killed) gets a new pod, LIMITS[api] times; then the job fails. A TrainJob:
    its JobSet counts `status.restarts`. A PyTorchJob: the operator recreates the pod whatever
    backoffLimit says, and each pod's own first step (`trainer.pod_starts`, run here on the pod
    the API server holds: `start_step`) counts its starts in the run dir on moto's S3; the
    pod after the last restart exits 2, which the ExitCode policy does not retry; a launch of
    the same run id then is a new submission (its own created-at on the pods): its pod starts,
    counted from 0 again."""
    run_id = f"e2e-x137-{api[:3]}"
    try:
        _launch_one_node(local_cluster, api, run_id)
        ended: set[str] = set()
        limit = LIMITS[api]
        for attempt in range(limit + 1):
            pod = eventually(
                lambda: [
                    p
                    for p in pods_of(local_cluster, run_id, "Running")
                    if p["metadata"]["uid"] not in ended
                ],
                f"pod {attempt} of {run_id} running (after {attempt} exits with 137)",
                describe=lambda: (
                    conditions(_job(local_cluster, api, run_id)),
                    [
                        (p["metadata"]["name"], p["status"].get("phase"))
                        for p in pods_of(local_cluster, run_id)
                    ],
                ),
            )[0]
            failed = conditions(_job(local_cluster, api, run_id)).get("Failed", {})
            assert failed.get("status") != "True", (attempt, failed)
            if api == "trainjob":
                assert _jobset_restarts(local_cluster, api, run_id) == attempt
            assert local_cluster.start_step(pod) in (0, None), f"pod {attempt} did not start"
            ended.add(pod["metadata"]["uid"])
            local_cluster.finish(run_id, 137)
        if api == "pytorchjob":  # the operator made one more pod: its first step refuses it
            pod = eventually(
                lambda: [
                    p
                    for p in pods_of(local_cluster, run_id, "Running")
                    if p["metadata"]["uid"] not in ended
                ],
                f"the pod after {limit} restarts of {run_id}",
            )[0]
            code = local_cluster.start_step(pod)
            assert code == EXIT_BAD_INPUT, f"pod {limit + 1} started past the limit: {code}"
            local_cluster.finish(run_id, code)
        failed = eventually(
            lambda: (
                conditions(_job(local_cluster, api, run_id)).get("Failed", {}).get("status")
                == "True"
                and conditions(_job(local_cluster, api, run_id))["Failed"]
            ),
            f"{run_id} failed after {limit} restarts",
            timeout=30,
        )
        if api == "trainjob":
            assert failed.get("reason") == "ReachedMaxRestarts", failed
            assert _jobset_restarts(local_cluster, api, run_id) == limit
            assert f"JobSet restarts: {limit}" in _status(local_cluster, run_id)
        assert "failed" in _status(local_cluster, run_id).lower()
        assert not pods_of(local_cluster, run_id, "Running"), "restarted past the limit"
        if api == "pytorchjob":  # relaunched: a new submission, its count from 0
            _launch_one_node(local_cluster, api, run_id)
            pod = eventually(
                lambda: [
                    p
                    for p in pods_of(local_cluster, run_id, "Running")
                    if p["metadata"]["uid"] not in ended
                ],
                f"the relaunched {run_id}'s pod",
            )[0]
            assert local_cluster.start_step(pod) == 0, "the relaunch went on counting"
            local_cluster.finish(run_id, 0)
            eventually(
                lambda: "succeeded" in _status(local_cluster, run_id).lower(),
                f"the relaunched {run_id} succeeded",
            )
    finally:
        remove_run(local_cluster, run_id)
