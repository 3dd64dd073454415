"""`trainstack launch --wait`, auto-restart, runs/status/logs/cancel against the fake cluster."""

from __future__ import annotations

import json
import threading
import time

from jobs.backends.kubernetes.client.state import CANCELLED_ANNOTATION, RETRIES_ANNOTATION
from testing_support.k8s.cluster import NAMESPACE
from testing_support.k8s.fake_operator import JobPlan

FAILED = JobPlan(outcome="Failed")


def test_wait_streams_the_master_log_and_exits_with_success(trainstack, capsys):
    assert trainstack("launch", "--wait", "run_id=ok1", launch=True) == 0
    out = capsys.readouterr().out
    assert "[ok1-master-0] step 4 loss 1.000" in out
    assert out.index("[ok1-master-0] step 4") < out.index("[trainstack] ok1: Succeeded")
    assert "ok1: succeeded" in out


def test_wait_rides_out_a_pod_killed_mid_run(apiserver, trainstack, capsys):
    apiserver.operator.plans["pk1"] = [JobPlan(steps=5, step_seconds=0.08, kill_pod_at=2)]
    assert trainstack("launch", "--wait", "run_id=pk1", launch=True) == 0
    out = capsys.readouterr().out
    assert "[trainstack] pk1: Restarting" in out
    assert "[pk1-master-0] resumed from latest checkpoint" in out
    assert out.index("resumed from latest checkpoint") < out.index("[pk1-master-0] step 5 ")
    assert apiserver.operator.created["pk1"] == 1  # the operator restarted the pod, not us


def test_failed_runs_restart_bounded_and_counted(apiserver, trainstack, capsys):
    apiserver.operator.plans["rf1"] = [FAILED, FAILED, FAILED, JobPlan()]
    code = trainstack("launch", "--wait", "run_id=rf1", "job.max_retries=2", launch=True)
    out = capsys.readouterr().out
    assert code != 0
    assert apiserver.operator.created["rf1"] == 3  # the first try and two restarts, no more
    assert "restart 1/2" in out and "restart 2/2" in out and "restart 3/" not in out
    job = apiserver.get("pytorchjobs", "rf1", NAMESPACE)
    assert job["metadata"]["annotations"][RETRIES_ANNOTATION] == "2"
    assert trainstack("status", "rf1") == 0
    status = capsys.readouterr().out
    assert "state      failed" in status and "retries    2" in status
    assert "PyTorchJobFailed: master-0 exited with code 1" in status


def test_a_restart_that_succeeds_exits_zero(apiserver, trainstack, capsys):
    apiserver.operator.plans["rf2"] = [FAILED, JobPlan()]
    assert trainstack("launch", "--wait", "run_id=rf2", "job.max_retries=1", launch=True) == 0
    assert apiserver.operator.created["rf2"] == 2
    assert "rf2: resumed (retry 1/1)" in capsys.readouterr().out


def test_cancelled_runs_are_not_restarted(apiserver, trainstack, capsys, monkeypatch, kubeconfig):
    from jobs.backends.kubernetes.backend import KubernetesBackend
    from jobs.backends.kubernetes.submitting import ClusterSettings

    # Cancelled while running: suspended, reported cancelled, never resubmitted.
    apiserver.operator.plans["rc1"] = [JobPlan(hold=True)]
    canceller = _when_running(apiserver, "rc1", lambda: trainstack("cancel", "rc1"))
    code = trainstack("launch", "--wait", "run_id=rc1", "job.max_retries=3", launch=True)
    canceller.join()
    assert code != 0 and apiserver.operator.created["rc1"] == 1
    assert "[trainstack] rc1: Cancelled" in capsys.readouterr().out
    assert apiserver.list("pods", NAMESPACE) == []  # the operator removed them on suspend

    # Failed, then cancelled during the restart backoff: the restart is called off. (The
    # backend's cancel directly: the CLI's config composition could outlast the backoff.)
    monkeypatch.setattr(KubernetesBackend, "restart_backoff_s", 0.5)
    apiserver.operator.plans["rc2"] = [FAILED, JobPlan()]
    backend = KubernetesBackend(
        ClusterSettings(str(kubeconfig), None, NAMESPACE, job_api="pytorchjob")
    )
    canceller = _when_failed(apiserver, "rc2", lambda: backend.cancel("rc2"))
    code = trainstack("launch", "--wait", "run_id=rc2", "job.max_retries=3", launch=True)
    canceller.join()
    assert code != 0 and apiserver.operator.created["rc2"] == 1
    assert "cancelled meanwhile; not restarting" in capsys.readouterr().out


def test_cancel_is_idempotent_for_runs_and_sweeps(apiserver, trainstack, capsys):
    apiserver.operator.default = JobPlan(hold=True)
    for index in range(2):
        assert trainstack("launch", f"run_id=sw-{index}", "sweep_id=sw", launch=True) == 0
    assert trainstack("cancel", "sw-0") == 0
    assert trainstack("cancel", "sw-0") == 0
    assert trainstack("cancel", "--sweep", "sw") == 0
    assert trainstack("cancel", "--sweep", "sw") == 0
    assert trainstack("cancel", "no-such-run") == 0
    out = capsys.readouterr().out
    assert out.count("sw-0: cancel requested") == 1 and out.count("sw-1: cancel requested") == 1
    assert "sw-0: already cancelled" in out and "no-such-run: no such run" in out
    for name in ("sw-0", "sw-1"):
        job = apiserver.get("pytorchjobs", name, NAMESPACE)
        assert CANCELLED_ANNOTATION in job["metadata"]["annotations"]
        assert job["spec"]["runPolicy"]["suspend"] is True
    patches = apiserver.count("PATCH", "/pytorchjobs/sw-0")
    assert patches == 1  # the second cancel sent nothing


def test_runs_table_and_logs_by_rank(apiserver, trainstack, capsys, tmp_path):
    apiserver.operator.default = JobPlan(steps=3, step_seconds=0.02)
    assert trainstack("launch", "--wait", "run_id=lg1", "sweep_id=tbl", launch=True) == 0
    assert trainstack("launch", "run_id=lg2", "compute.nodes=1", launch=True) == 0
    apiserver.operator.wait_idle()
    metrics = tmp_path / "runs" / "lg1" / "logs" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    lines = [{"step": 10, "loss": 3.5}, {"step": 20, "loss": 2.25}, {"step": 20, "eval_loss": 2}]
    metrics.write_text("".join(json.dumps(x) + "\n" for x in lines))
    capsys.readouterr()

    assert trainstack("runs", "--backend", "kubernetes", "--sweep", "tbl") == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("lg1"))
    # The last column is the newest `trainstack eval` score: none here.
    assert row.split() == [
        *("lg1", "tbl", "kubernetes", "succeeded", "1", "0", "0m", "20", "2.2500", "-")
    ]
    assert "lg2" not in out and "sweep tbl: 1/1 finished" in out

    assert trainstack("runs", "--backend", "kubernetes", "--state", "succeeded") == 0
    assert "lg2" in capsys.readouterr().out

    assert trainstack("logs", "lg1") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"[lg1-master-0] step {step} loss {4.0 / step:.3f}" for step in (1, 2, 3)
    ]
    assert trainstack("logs", "lg1", "-f", "--rank", "0") == 0
    assert "[lg1-master-0] step 3 loss 1.333" in capsys.readouterr().out
    assert trainstack("logs", "lg1", "--rank", "1") == 2  # bad input, as on every backend
    assert "--rank 1: run lg1 has rank 0 only" in capsys.readouterr().err


def _when(apiserver, name: str, condition: str, action) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            job = apiserver.get("pytorchjobs", name, NAMESPACE) or {}
            types = [c["type"] for c in (job.get("status") or {}).get("conditions", [])]
            if condition in types:
                action()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _when_running(apiserver, name, action):
    return _when(apiserver, name, "Running", action)


def _when_failed(apiserver, name, action):
    return _when(apiserver, name, "Failed", action)
