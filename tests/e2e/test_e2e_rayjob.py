"""RayJobs on the real KubeRay operator (v1.6.2) and Kueue (v0.19.2): admitted as one Workload
with the head, worker and submitter pods on the simulated nodes, a second one queued with
Kueue's reason in `status`, cancel freeing the quota, preemption and re-admission, and runs
that end succeeded or failed. No container runs here: the submitter pod's end (set by the test)
is what `ray job submit` would report, and localcluster's dashboard stand-in answers KubeRay
from it as Ray's Jobs API does (localcluster/ray_dashboard.py)."""

from __future__ import annotations

from tests.e2e.conftest import (
    admitted,
    conditions,
    eventually,
    pods_of,
    remove_run,
    workload_of,
)

RAY_API, KIND = "ray.io/v1", "RayJob"
PROGRAM = ("runner=command", "runner.torchrun=false", "runner.command=[python,-c,pass]")
TWO_NODES = ("compute=p5.48xlarge", "compute.nodes=2")
WHERE = ("stack=local", "backend=kubernetes")


def launch(cluster, run_id: str, *extra: str) -> str:
    return cluster.launch("job.api=rayjob", *PROGRAM, *TWO_NODES, f"run_id={run_id}", *extra)


def rayjob(cluster, run_id: str) -> dict:
    return cluster.get(RAY_API, KIND, run_id)


def deployment(cluster, run_id: str) -> str:
    return (rayjob(cluster, run_id).get("status") or {}).get("jobDeploymentStatus") or ""


def submitter_pods(cluster, run_id: str, phase: str | None = None) -> list[dict]:
    pods = cluster.items("v1", "Pod", f"batch.kubernetes.io/job-name={run_id}")
    return [p for p in pods if phase is None or p["status"].get("phase") == phase]


def ray_pods(cluster, run_id: str) -> list[dict]:
    """The Ray cluster's running head and worker pods (KubeRay's labels)."""
    return [
        p
        for p in pods_of(cluster, run_id, "Running")
        if (p["metadata"].get("labels") or {}).get("ray.io/node-type") in ("head", "worker")
    ]


def running(cluster, run_id: str) -> list[dict]:
    """Head and both workers running, and the submitter started: the driver runs."""
    return eventually(
        lambda: (
            len(ray_pods(cluster, run_id)) == 3
            and submitter_pods(cluster, run_id, "Running")
            and deployment(cluster, run_id) == "Running"
            and ray_pods(cluster, run_id)
        ),
        f"{run_id}'s Ray cluster and driver running",
        timeout=120,
        describe=lambda: (deployment(cluster, run_id), len(ray_pods(cluster, run_id))),
    )


def status(cluster, run_id: str) -> str:
    return cluster.trainstack("status", run_id, *WHERE)


def test_a_rayjob_is_admitted_runs_and_succeeds(local_cluster):
    run_id = "e2e-ray-ok"
    try:
        launch(local_cluster, run_id)
        workload = eventually(lambda: admitted(local_cluster, KIND, run_id), f"{run_id} admitted")
        # One Workload: the head, the worker group and K8sJobMode's submitter.
        names = {ps["name"] for ps in workload["spec"]["podSets"]}
        assert names == {"head", "workers", "submitter"}, names
        # Kueue's flavors: the workers the GPU group's, the head and submitter `system` (the
        # GPU flavors are tainted; the head tolerates nothing).
        flavors = {
            ps["name"]: set(ps["flavors"].values())
            for ps in workload["status"]["admission"]["podSetAssignments"]
        }
        assert flavors == {"head": {"system"}, "workers": {"p5"}, "submitter": {"system"}}, flavors
        pods = running(local_cluster, run_id)
        workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
        for pod in workers:
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == "8", limits
            assert pod["spec"]["nodeName"].startswith("p5-"), pod["spec"]["nodeName"]
        (head,) = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
        assert head["spec"]["nodeName"] == "system-0", head["spec"]["nodeName"]
        (submitter,) = submitter_pods(local_cluster, run_id, "Running")
        assert submitter["spec"]["nodeName"] == "system-0", submitter["spec"]["nodeName"]
        assert "running" in status(local_cluster, run_id).lower()

        ended = local_cluster.finish(run_id, 0)
        assert ended and all(name.startswith(f"{run_id}-") for name in ended), ended
        eventually(
            lambda: deployment(local_cluster, run_id) == "Complete",
            f"{run_id} Complete",
            describe=lambda: rayjob(local_cluster, run_id).get("status"),
        )
        assert rayjob(local_cluster, run_id)["status"]["jobStatus"] == "SUCCEEDED"
        assert "succeeded" in status(local_cluster, run_id).lower()
        listed = local_cluster.trainstack("runs", *WHERE)
        assert run_id in listed and "succeeded" in listed.lower(), listed
        # The driver's log: the submitter pod's (kwok serves one line for every container).
        assert "simulated by kwok" in local_cluster.trainstack("logs", run_id, *WHERE)
        # shutdownAfterJobFinishes: KubeRay deletes the Ray cluster.
        eventually(lambda: not ray_pods(local_cluster, run_id), f"{run_id}'s Ray cluster gone")
    finally:
        remove_run(local_cluster, run_id)


def test_a_second_rayjob_waits_with_kueues_reason_until_cancel_frees_quota(local_cluster):
    first, second = "e2e-ray-q1", "e2e-ray-q2"
    try:
        launch(local_cluster, first)
        eventually(lambda: admitted(local_cluster, KIND, first), f"{first} admitted")
        launch(local_cluster, second)
        reason = eventually(
            lambda: (
                conditions(workload_of(local_cluster, KIND, second) or {})
                .get("QuotaReserved", {})
                .get("message")
            ),
            f"Kueue's reason for holding {second}",
        )
        assert "insufficient unused quota" in reason, reason
        assert "insufficient unused quota" in status(local_cluster, second)
        assert not ray_pods(local_cluster, second)

        local_cluster.trainstack("cancel", first, *WHERE)
        eventually(lambda: admitted(local_cluster, KIND, second), f"{second} admitted")
        running(local_cluster, second)
        eventually(lambda: not ray_pods(local_cluster, first), f"{first}'s Ray cluster gone")
        assert "cancelled" in status(local_cluster, first).lower()
    finally:
        remove_run(local_cluster, first)
        remove_run(local_cluster, second)


def test_a_higher_priority_job_preempts_a_rayjob_which_is_admitted_again(local_cluster):
    """Preempted, KubeRay deletes the Ray cluster (Suspending, Suspended); admitted again, a new
    Ray cluster starts: the program resumes from its newest checkpoint (VERL's
    `trainer.resume_mode=auto`, the built-in contract's TRAINSTACK_CHECKPOINT_DIR)."""
    low, high = "e2e-ray-lo", "e2e-ray-hi"
    try:
        launch(local_cluster, low, "job.priority=low")
        first_cluster = {
            p["metadata"]["labels"]["ray.io/cluster"] for p in running(local_cluster, low)
        }
        local_cluster.launch(
            *TWO_NODES, "job.api=pytorchjob", f"run_id={high}", "job.priority=high"
        )
        eventually(lambda: admitted(local_cluster, "PyTorchJob", high), f"{high} admitted")
        evicted = conditions(workload_of(local_cluster, KIND, low)).get("Evicted", {})
        assert evicted.get("reason") == "Preempted", evicted
        eventually(lambda: not ray_pods(local_cluster, low), f"{low}'s Ray cluster deleted")
        assert "queued" in status(local_cluster, low).lower()

        local_cluster.finish(high, 0)
        eventually(lambda: admitted(local_cluster, KIND, low), f"{low} admitted again")
        again = {p["metadata"]["labels"]["ray.io/cluster"] for p in running(local_cluster, low)}
        assert again and again != first_cluster, (first_cluster, again)
    finally:
        remove_run(local_cluster, low)
        remove_run(local_cluster, high)


def test_a_driver_that_fails_ends_the_rayjob_failed(local_cluster):
    """`job.max_restarts=0`: no new Ray cluster. The submitter Job retries `ray job submit`
    (KubeRay's backoffLimit 2), each attempt ending as the driver did."""
    run_id = "e2e-ray-fail"
    try:
        launch(local_cluster, run_id, "job.max_restarts=0")
        running(local_cluster, run_id)

        def failed() -> bool:
            local_cluster.finish(run_id, 1)
            return deployment(local_cluster, run_id) == "Failed"

        eventually(
            failed,
            f"{run_id} Failed",
            timeout=120,
            describe=lambda: rayjob(local_cluster, run_id).get("status"),
        )
        printed = status(local_cluster, run_id)
        assert "failed" in printed.lower(), printed
    finally:
        remove_run(local_cluster, run_id)
