"""`trainstack launch -m ... hydra/launcher=kubernetes` through real Hydra multirun."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from testing_support.k8s.cluster import NAMESPACE
from testing_support.k8s.fake_operator import JobPlan

SWEEP = ["-m", "hydra/launcher=kubernetes", "trainer.lr=1e-4,3e-4,1e-3"]


def test_submit_mode_survives_a_failed_point_and_skips_on_rerun(apiserver, trainstack, capsys):
    apiserver.operator.default = JobPlan(hold=True)
    apiserver.faults.reject_create["sw1-1"] = 403
    code = trainstack("launch", *SWEEP, "sweep_id=sw1", launch=True)
    out, err = capsys.readouterr()
    assert code == 1  # the sweep reports the failed point ...
    assert "point 1: not submitted: create PyTorchJob training/sw1-1 failed: 403" in out
    assert "create PyTorchJob training/sw1-1 failed: 403 Forbidden: injected" in err
    # ... after submitting every other point, all labelled with the one sweep id.
    jobs = apiserver.list("pytorchjobs", NAMESPACE)
    assert sorted(j["metadata"]["name"] for j in jobs) == ["sw1-0", "sw1-2"]
    assert {j["metadata"]["labels"]["trainstack.io/sweep-id"] for j in jobs} == {"sw1"}

    # Re-running the same sweep submits only what is missing.
    del apiserver.faults.reject_create["sw1-1"]
    assert trainstack("launch", *SWEEP, "sweep_id=sw1", launch=True) == 0
    out = capsys.readouterr().out
    assert "point 0: sw1-0 already submitted (running); skipped" in out
    assert "point 2: sw1-2 already submitted (running); skipped" in out
    assert apiserver.operator.created == {"sw1-0": 1, "sw1-1": 1, "sw1-2": 1}

    assert trainstack("runs", "--backend", "kubernetes", "--sweep", "sw1") == 0
    assert "sweep sw1: 0/3 finished" in capsys.readouterr().out


def test_wait_mode_maps_final_states_onto_job_returns(apiserver, trainstack, capsys, tmp_path):
    # Plain `launch -m --wait` on kubernetes picks the launcher in wait mode by itself.
    apiserver.operator.plans["sw2-1"] = [JobPlan(outcome="Failed")]
    args = ["-m", "--wait", "trainer.lr=1e-4,3e-4,1e-3", "sweep_id=sw2", "job.max_retries=0"]
    assert trainstack("launch", *args, launch=True) == 1
    out, err = capsys.readouterr()
    assert "[trainstack] sw2-0: Succeeded" in out and "[trainstack] sw2-2: Succeeded" in out
    assert "sw2-1: failed (PyTorchJobFailed: master-0 exited with code 1)" in err
    assert "Traceback" not in err

    apiserver.operator.plans["sw3-1"] = [JobPlan(outcome="Failed"), JobPlan()]
    args = [*SWEEP, "hydra.launcher.mode=wait", "sweep_id=sw3", "job.max_retries=1"]
    assert trainstack("launch", *args, launch=True) == 0  # the failed point restarted and won
    assert apiserver.operator.created["sw3-1"] == 2
    summary = yaml.safe_load((tmp_path / "runs/sweeps/sw3/summary.yaml").read_text())
    assert [run["state"] for run in summary["runs"]] == ["succeeded"] * 3


def test_launcher_settings_are_checked():
    from hydra_plugins.kubernetes_launcher.launcher import KubernetesLauncher

    with pytest.raises(ValueError, match=r"hydra.launcher.mode: 'later' is not allowed"):
        KubernetesLauncher(mode="later")
    with pytest.raises(ValueError, match=r"hydra.launcher.max_parallel: 0 must be at least 1"):
        KubernetesLauncher(max_parallel=0)


def test_a_sweep_loads_its_kubeconfig_credentials_once(apiserver, trainstack, kubeconfig, tmp_path):
    """Every point makes backends (skip check, submit); the credential plugin of the
    kubeconfig (EKS: `aws eks get-token`, a process each time) runs once for the sweep."""
    calls = tmp_path / "plugin-calls"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "exec-token"},
    }
    script = f"open({str(calls)!r}, 'a').write('x'); print({json.dumps(credential)!r})"
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": credential["apiVersion"],
            "command": sys.executable,
            "args": ["-c", script],
            "interactiveMode": "Never",
        }
    }
    kubeconfig.write_text(yaml.safe_dump(config))
    apiserver.operator.default = JobPlan(hold=True)
    assert trainstack("launch", *SWEEP, "sweep_id=sw4", launch=True) == 0
    assert len(apiserver.list("pytorchjobs", NAMESPACE)) == 3
    assert calls.read_text() == "x"


def test_a_fixed_run_id_in_a_pytorchjob_sweep_is_refused_before_anything_is_sent(
    apiserver, trainstack, capsys
):
    # Today's defect: one job submitted, the other points "already submitted; skipped", exit 0.
    code = trainstack("launch", *SWEEP, "run_id=fixed", "sweep_id=sw9", launch=True)
    err = capsys.readouterr().err
    assert code == 2
    assert "run_id: the same run id for several points" in err
    assert apiserver.operator.created == {}
