"""TrainJobs (the default `job.api`) through the kubernetes backend against the fake apiserver,
whose Trainer admits them by the v2.3.0 CRD and runs them as a JobSet of pods: launch and
--wait, idempotent resubmission, a pod failure restarted by the runtime's failure policy, bad
input failing at once, second-line restarts, logs by rank, cancel, Kueue, runs listing both
kinds, preflight, and deletion cascading to the JobSet, pods and ConfigMap."""

from __future__ import annotations

import copy
import threading
import time
from datetime import UTC, datetime

import pytest

from jobs.backends.base import QUEUED, SUCCEEDED
from jobs.backends.kubernetes.client.submit import ALREADY_ACTIVE, submit
from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_kueue import QUEUE_LABEL, FakeKueue
from testing_support.k8s.fake_trainer import INDEX_LABEL, JOBSET_LABEL, TrainPlan

TRAINJOB = "job.api=trainjob"  # after the suites' LAUNCH_ARGS (job.api=pytorchjob): wins


def launch(trainstack, *args: str) -> int:
    return trainstack("launch", TRAINJOB, *args, launch=True)


def two_node_job(name: str, tmp_path) -> list[dict]:
    """A 2-node job's manifests as materialize makes them (several nodes need shared storage:
    the run dir annotation then points at a local directory, so status reads no bucket)."""
    from jobs.compose import compose
    from jobs.materialize import materialize

    cfg = compose(
        [
            "backend=render",
            "compute=p4d.24xlarge",
            "compute.nodes=2",
            "job.image=registry.example.com/trainer:v1",
            "storage.root=s3://bucket/runs",
        ]
    )
    job = materialize(cfg, now=datetime.now(UTC), git_sha=None, run_id=name)
    manifests = copy.deepcopy(job.manifests)
    for manifest in manifests:
        manifest["metadata"]["annotations"]["trainstack.io/run-dir"] = str(tmp_path / name)
    return manifests


def backend_for(kubeconfig):
    from jobs.backends.kubernetes.backend import KubernetesBackend
    from jobs.backends.kubernetes.submitting import ClusterSettings

    return KubernetesBackend(ClusterSettings(str(kubeconfig), "fake", NAMESPACE))


def _when(predicate, action) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 20
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.02)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


STATE_LINE = "[trainstack] tj1: "


def test_launch_wait_runs_a_trainjob_on_its_runtime_to_success(apiserver, trainstack, capsys):
    assert launch(trainstack, "--wait", "run_id=tj1") == 0
    out = capsys.readouterr().out
    assert "[trainstack] tj1: Succeeded" in out and "tj1: succeeded" in out
    # Its pods ended are counted nowhere for a moment (fake_trainer `_end`, as the real control
    # plane does): a read that looks like Created again, not shown as a change.
    states = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(STATE_LINE)]
    assert states[-2:] == ["Running", "Succeeded"], states
    assert "step 4 loss 1.000" in out  # rank 0's log, followed through the JobSet's pod
    job = apiserver.get("trainjobs", "tj1", NAMESPACE)
    assert job["spec"]["runtimeRef"]["name"] == "trainstack-p4d-24xlarge"
    assert apiserver.get("pytorchjobs", "tj1", NAMESPACE) is None
    cm = apiserver.get("configmaps", "tj1-config", NAMESPACE)
    (owner,) = cm["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", job["metadata"]["uid"])
    pods = apiserver.list("pods", NAMESPACE, {"labels": {JOBSET_LABEL: ("=", "tj1")}})
    assert sorted(p["metadata"]["labels"][INDEX_LABEL] for p in pods) == ["0"]
    assert all(p["metadata"]["labels"]["trainstack.io/run-id"] == "tj1" for p in pods)
    # The run's NetworkPolicy, owned by the TrainJob, lets in exactly its pods.
    policy = apiserver.get("networkpolicies", "tj1-peers", NAMESPACE)
    (owner,) = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", job["metadata"]["uid"])
    selector = policy["spec"]["podSelector"]["matchLabels"]
    selected = apiserver.list(
        "pods", NAMESPACE, {"labels": {k: ("=", v) for k, v in selector.items()}}
    )
    assert selector and {p["metadata"]["name"] for p in selected} == {
        p["metadata"]["name"] for p in pods
    }
    assert trainstack("status", "tj1") == 0
    assert "state      succeeded" in capsys.readouterr().out
    from jobs.backends.kubernetes.run_status import to_status

    assert to_status(job).finished_at  # from the Complete condition (a TrainJob has no time)
    # Trainer copies its JobSet's condition (kubeflow/trainer v2.3.0, plugins/jobset/jobset.go;
    # the reason: kubernetes-sigs/jobset v0.12.0, pkg/constants/constants.go).
    (complete,) = [c for c in job["status"]["conditions"] if c["type"] == "Complete"]
    assert complete["reason"] == "AllJobsCompleted"


def test_submitting_an_active_run_again_changes_nothing(apiserver, cluster, tmp_path):
    apiserver.trainer.plans["tj2"] = [TrainPlan(hold=True)]
    manifests = two_node_job("tj2", tmp_path)
    assert submit(cluster, manifests).outcome == "created"
    assert submit(cluster, manifests).outcome == ALREADY_ACTIVE
    assert apiserver.trainer.created["tj2"] == 1


def test_a_pod_failure_is_restarted_by_the_runtimes_failure_policy(
    apiserver, cluster, kubeconfig, tmp_path
):
    plan = TrainPlan(steps=4, step_seconds=0.05, fail_at=2, exit_code=137)
    apiserver.trainer.plans["tj3"] = [plan]
    submit(cluster, two_node_job("tj3", tmp_path))
    backend = backend_for(kubeconfig)
    assert backend.wait("tj3", on_line=lambda line: None).state == SUCCEEDED
    assert apiserver.trainer.created["tj3"] == 1  # the JobSet restarted it, not trainstack
    jobset = apiserver.get("jobsets", "tj3", NAMESPACE)
    assert jobset["status"]["restarts"] == 1
    status = backend.status("tj3")
    assert status.nodes == 2 and "JobSet restarts: 1" in status.message
    attempts = {
        p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
        for p in apiserver.list("pods", NAMESPACE)
    }
    assert attempts == {"1"}  # the first attempt's pods were replaced


def test_retryable_failures_beyond_the_runtimes_max_restarts_fail_the_run(
    apiserver, cluster, kubeconfig, tmp_path
):
    plan = TrainPlan(steps=3, step_seconds=0.02, fail_at=1, exit_code=143, failures=10)
    apiserver.trainer.plans["tj3b"] = [plan]
    submit(cluster, two_node_job("tj3b", tmp_path))
    final = backend_for(kubeconfig).wait("tj3b", on_line=lambda line: None)
    assert final.state == "failed" and final.message.startswith("ReachedMaxRestarts: ")
    assert apiserver.get("jobsets", "tj3b", NAMESPACE)["status"]["restarts"] == 3


def test_bad_input_fails_at_once_and_the_second_line_resubmits_bounded(
    apiserver, trainstack, capsys
):
    bad = TrainPlan(fail_at=1, exit_code=2)
    apiserver.trainer.plans["tj4"] = [bad, bad]
    code = launch(trainstack, "--wait", "run_id=tj4", "job.max_retries=1")
    out = capsys.readouterr().out
    assert code != 0
    assert apiserver.trainer.created["tj4"] == 2  # the first try and one resubmission
    assert apiserver.get("jobsets", "tj4", NAMESPACE)["status"]["restarts"] == 0
    assert "restart 1/1" in out
    assert trainstack("status", "tj4") == 0
    status = capsys.readouterr().out
    assert "state      failed" in status and "FailJobSetFailurePolicyAction" in status


def test_logs_of_a_rank_are_its_pods(apiserver, cluster, kubeconfig, tmp_path):
    submit(cluster, two_node_job("tj5", tmp_path))
    backend = backend_for(kubeconfig)
    assert backend.wait("tj5", on_line=lambda line: None).state == SUCCEEDED
    rank1 = list(backend.logs("tj5", rank=1))
    assert rank1 and all("tj5-node-0-1-" in line for line in rank1)
    from jobs.backends.base import BackendError

    with pytest.raises(BackendError, match=r"--rank 2 is out of range: the job has ranks 0\.\.1"):
        list(backend.logs("tj5", rank=2))


def test_cancel_suspends_the_trainjob_and_its_pods_go(apiserver, trainstack, capsys):
    apiserver.trainer.plans["tj6"] = [TrainPlan(hold=True)]

    def running() -> bool:
        job = apiserver.get("trainjobs", "tj6", NAMESPACE) or {}
        return any(j.get("active") for j in (job.get("status") or {}).get("jobsStatus") or [])

    canceller = _when(running, lambda: trainstack("cancel", "tj6"))
    code = launch(trainstack, "--wait", "run_id=tj6", "job.max_retries=2")
    canceller.join()
    assert code != 0 and apiserver.trainer.created["tj6"] == 1
    assert "[trainstack] tj6: Cancelled" in capsys.readouterr().out
    assert apiserver.get("trainjobs", "tj6", NAMESPACE)["spec"]["suspend"] is True
    assert apiserver.list("pods", NAMESPACE) == []


def test_queued_trainjob_waits_for_kueue_and_runs_once_admitted(
    apiserver, kubeconfig, trainstack, capsys
):
    kueue = FakeKueue(apiserver)
    assert launch(trainstack, "run_id=tj7", "job.queue=team-a", "--skip-preflight") == 0
    job = apiserver.get("trainjobs", "tj7", NAMESPACE)
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    backend = backend_for(kubeconfig)
    status = backend.status("tj7")
    assert status.state == QUEUED and "waiting in queue team-a" in status.message
    assert [r.state for r in backend.list_runs() if r.run_id == "tj7"] == [QUEUED]
    assert apiserver.list("pods", NAMESPACE) == []
    kueue.admit("tj7")
    assert backend.wait("tj7", on_line=lambda line: None).state == SUCCEEDED


def test_a_preempted_trainjob_is_queued_again_and_resumes_when_readmitted(
    apiserver, kubeconfig, trainstack
):
    kueue = FakeKueue(apiserver)
    apiserver.trainer.plans["tj7b"] = [TrainPlan(steps=40, step_seconds=0.05)]
    assert launch(trainstack, "run_id=tj7b", "job.queue=team-a", "--skip-preflight") == 0
    kueue.admit("tj7b")
    backend = backend_for(kubeconfig)
    deadline = time.monotonic() + 10
    while backend.status("tj7b").state != "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    kueue.preempt("tj7b")
    status = backend.status("tj7b")
    assert status.state == QUEUED and "after preempted" in status.message
    assert apiserver.list("pods", NAMESPACE) == []  # Trainer deleted them on suspend
    kueue.admit("tj7b")
    assert backend.wait("tj7b", on_line=lambda line: None).state == SUCCEEDED
    assert apiserver.trainer.created["tj7b"] == 1  # re-admitted, never resubmitted


def test_runs_lists_trainjobs_and_pytorchjobs(apiserver, cluster, kubeconfig, trainstack):
    assert launch(trainstack, "--wait", "run_id=tj8") == 0
    labels = {"app.kubernetes.io/managed-by": "trainstack"}
    submit(cluster, [config_map("pj8"), pytorch_job("pj8", labels=labels)])
    apiserver.operator.wait_idle()
    runs = {r.run_id: r for r in backend_for(kubeconfig).list_runs()}
    assert {"tj8", "pj8"} <= set(runs)
    assert runs["tj8"].state == runs["pj8"].state == SUCCEEDED
    # A cluster without Trainer (the old operator only) still lists its runs by default.
    apiserver.faults.read_errors = [404]  # the first LIST (TrainJobs): not served
    runs = {r.run_id for r in backend_for(kubeconfig).list_runs()}
    assert "pj8" in runs and "tj8" not in runs


def test_preflight_checks_the_crd_and_the_named_runtime(apiserver, trainstack, capsys):
    ours = apiserver.get("clustertrainingruntimes", "trainstack-p4d-24xlarge")
    apiserver.remove("clustertrainingruntimes", "trainstack-p4d-24xlarge")
    assert launch(trainstack, "run_id=tj9") != 0
    err = capsys.readouterr().err
    assert "job.runtime: 'trainstack-p4d-24xlarge' is not one of trainstack's" in err
    assert apiserver.get("trainjobs", "tj9", NAMESPACE) is None
    # A runtime of that name someone else installed (no part-of label) is refused the same way.
    foreign = {**ours, "metadata": {"name": "trainstack-p4d-24xlarge"}}
    apiserver.put("clustertrainingruntimes", foreign)
    assert launch(trainstack, "run_id=tj9") != 0
    assert "job.runtime: 'trainstack-p4d-24xlarge' is not one of trainstack's" in (
        capsys.readouterr().err
    )
    assert apiserver.get("trainjobs", "tj9", NAMESPACE) is None
    apiserver.remove("customresourcedefinitions", "trainjobs.trainer.kubeflow.org")
    assert launch(trainstack, "run_id=tj9") != 0
    err = capsys.readouterr().err
    assert "CRD trainjobs.trainer.kubeflow.org is not installed" in err
    assert "job.api=pytorchjob" in err


def test_deleting_a_trainjob_deletes_its_jobset_pods_and_config(apiserver, cluster, tmp_path):
    apiserver.trainer.plans["tj10"] = [TrainPlan(hold=True)]
    submit(cluster, two_node_job("tj10", tmp_path))
    deadline = time.monotonic() + 10
    while len(apiserver.list("pods", NAMESPACE)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(apiserver.list("pods", NAMESPACE)) == 2
    from jobs.backends.kubernetes.client.kinds import TRAINJOB as KIND
    from jobs.backends.kubernetes.client.submit import delete_job

    delete_job(cluster, "tj10", kind=KIND)
    for plural in ("trainjobs", "jobsets", "configmaps", "networkpolicies"):
        assert apiserver.list(plural, NAMESPACE) == [], plural
    assert apiserver.list("pods", NAMESPACE) == []


def test_the_fake_trainer_refuses_what_the_crd_refuses(apiserver, cluster):
    from jobs.backends.kubernetes.client.api import ClusterError

    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bad1"},
        "spec": {
            "runtimeRef": {"name": "trainstack-p4d-24xlarge"},
            "trainer": {"image": "r/t:v1", "numNode": 2},
        },
    }
    with pytest.raises(ClusterError, match=r"422 Unprocessable Entity: .*'numNode' was unexpected"):
        submit(cluster, [job])
    assert apiserver.get("trainjobs", "bad1", NAMESPACE) is None
    del job["spec"]["trainer"]["numNode"]
    job["spec"]["trainer"]["env"] = [{"name": "PET_NODE_RANK", "value": "0"}]
    with pytest.raises(ClusterError, match="must not have reserved envs"):
        submit(cluster, [job])
    job["spec"]["runtimeRef"]["name"] = "nope"
    with pytest.raises(ClusterError, match='ClusterTrainingRuntime "nope" not found'):
        submit(cluster, [job])


def test_a_sweep_of_trainjobs_through_the_launcher(apiserver, trainstack, capsys):
    apiserver.trainer.plans["tsw-1"] = [TrainPlan(fail_at=1, exit_code=2)]
    args = ["-m", "hydra/launcher=trainjob", "trainer.lr=1e-4,3e-4", "sweep_id=tsw"]
    code = launch(trainstack, *args, "--wait", "job.max_retries=0")
    out, err = capsys.readouterr()
    assert code == 1  # one point failed on bad input; the other succeeded
    assert "[trainstack] tsw-0: Succeeded" in out and "tsw-1: failed" in err
    jobs = apiserver.list("trainjobs", NAMESPACE)
    assert sorted(j["metadata"]["name"] for j in jobs) == ["tsw-0", "tsw-1"]
    assert {j["metadata"]["labels"]["trainstack.io/sweep-id"] for j in jobs} == {"tsw"}
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    assert trainstack("runs", "--backend", "kubernetes", "--sweep", "tsw") == 0
    assert "sweep tsw: 2/2 finished" in capsys.readouterr().out


def test_a_failed_trainjob_never_runs_again_by_itself(apiserver, cluster, kubeconfig, tmp_path):
    """Trainer clears a Failed condition and recreates a missing JobSet on every reconcile
    (kubeflow/trainer v2.3.0, pkg/controller/trainjob_controller.go), so a JobSet TTL on the
    runtime would start a failed training again once it deleted the JobSet. trainstack's
    runtimes set none; the finished TrainJob is deleted by trainstack after TRAINJOB_TTL_S."""
    from jobs.backends.kubernetes.runtimes import cluster_training_runtimes

    for runtime in cluster_training_runtimes([]):
        assert "ttlSecondsAfterFinished" not in runtime["spec"]["template"]["spec"]
    apiserver.trainer.plans["tj9"] = [TrainPlan(fail_at=1, exit_code=2)]
    submit(cluster, two_node_job("tj9", tmp_path))
    backend = backend_for(kubeconfig)
    assert backend.wait("tj9", on_line=lambda line: None).state == "failed"
    apiserver.trainer.jobset_ttl_passed("tj9", NAMESPACE)
    apiserver.trainer.reconcile("tj9", NAMESPACE)
    time.sleep(0.2)
    assert apiserver.trainer.created["tj9"] == 1  # no second JobSet, no new pods
    assert backend.status("tj9").state == "failed"
    running = [
        p
        for p in apiserver.list("pods", NAMESPACE, {"labels": {JOBSET_LABEL: ("=", "tj9")}})
        if p["status"]["phase"] in ("Pending", "Running")
    ]
    assert running == []


def test_a_finished_trainjob_is_deleted_by_trainstack_after_its_time(
    apiserver, cluster, kubeconfig, tmp_path
):
    submit(cluster, two_node_job("tj10", tmp_path))
    backend = backend_for(kubeconfig)
    assert backend.wait("tj10", on_line=lambda line: None).state == SUCCEEDED
    assert "tj10" in [r.run_id for r in backend.list_runs()]  # within its time: kept

    def long_ago(job: dict) -> None:
        for condition in job["status"]["conditions"]:
            condition["lastTransitionTime"] = "2020-01-01T00:00:00Z"

    apiserver.update("trainjobs", "tj10", NAMESPACE, long_ago)
    assert "tj10" not in [r.run_id for r in backend.list_runs()]
    deadline = time.monotonic() + 5
    while apiserver.get("trainjobs", "tj10", NAMESPACE) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
