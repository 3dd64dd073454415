"""The same verbs on a local run (no cluster configured): runs, status, logs, cancel."""

from __future__ import annotations

import json

import pytest

from contract.run_dir import METRICS_FILE
from jobs.backends import run_state
from jobs.cli import main


@pytest.fixture
def local_run(tmp_path, monkeypatch):
    """A finished local run as the local backend leaves it: job/state.json, output, metrics."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    run_dir = tmp_path / "runs" / "loc1"
    run_state.write_state(
        run_dir,
        {
            "run_id": "loc1",
            "sweep_id": "sl",
            "backend": "local",
            "state": "succeeded",
            "nodes": 1,
            "started_at": "2026-11-22T00:00:00Z",
            "finished_at": "2026-11-22T00:05:00Z",
            "exit_code": 0,
            "pid": None,
        },
    )
    (run_dir / run_state.OUTPUT_LOG).write_text(
        "launcher line\n[default0]:rank zero says hi\n[default1]:rank one says hi\n"
    )
    metrics = run_dir / METRICS_FILE
    metrics.parent.mkdir(parents=True)
    metrics.write_text(json.dumps({"step": 30, "loss": 1.5}) + "\n")
    return run_dir


def test_local_runs_answer_the_same_verbs(local_run, capsys):
    root = f"storage.root={local_run.parent}"
    assert main(["runs", "--sweep", "sl", root]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "loc1" in line)
    assert row.split()[:4] == ["loc1", "sl", "local", "succeeded"]
    assert row.split()[-3:] == ["30", "1.5000", "-"]  # step, loss, no eval yet

    assert main(["status", "loc1", root]) == 0
    assert "backend    local" in capsys.readouterr().out

    assert main(["logs", "loc1", "--rank", "1", root]) == 0
    assert capsys.readouterr().out.splitlines() == ["launcher line", "[default1]:rank one says hi"]

    assert main(["cancel", "loc1", root]) == 0
    assert main(["cancel", "loc1", root]) == 0
    assert capsys.readouterr().out.count("loc1: already succeeded (local)") == 2
    assert run_state.read_state(local_run)["state"] == "succeeded"
