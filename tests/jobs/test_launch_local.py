"""`trainstack launch` end to end on the local backend: real torchrun, 2 processes, a few
steps; then the same run id again resumes from its checkpoint. Also the local verbs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs.backends import run_state
from jobs.backends.base import RUNNING, SUCCEEDED
from jobs.backends.local.backend import LocalBackend
from tests.jobs.conftest import SAMPLE_DATA

FAST = [
    f"data.path={SAMPLE_DATA}",
    "data.seq_len=64",
    "model.n_layers=2",
    "trainer.micro_batch_size=2",
    "trainer.log_interval=1",
    "trainer.eval_interval=0",
    "trainer.warmup_steps=1",
    "trainer.checkpoint.interval=2",
    "run_id=e2e",
]


def logged_steps(run_dir: Path) -> list[dict]:
    lines = (run_dir / "logs" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


@pytest.mark.slow
def test_launch_runs_torchrun_locally_and_resumes(cli, workdir):
    first = cli("launch", *FAST, "trainer.max_steps=2")
    assert first.code == 0, first.err + first.out[-2000:]
    run_dir = workdir / "runs" / "e2e"
    assert "run      e2e" in first.out and "tiny" in first.out  # the plan came first
    assert "[default0]:" in first.out  # progress streamed from the ranks
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "checkpoints" / "step-00000002" / "COMMITTED").is_file()
    assert [r["step"] for r in logged_steps(run_dir)] == [1, 2]
    state = json.loads((run_dir / "job" / "state.json").read_text())
    assert (state["state"], state["exit_code"], state["attempt"]) == (SUCCEEDED, 0, 1)
    # The pod's command, with the config path pointing at the local copy.
    assert state["command"][1:] == [
        "-m",
        "trainer.launch",
        "--shutdown-timeout=270",
        "--max-restarts=3",
        "-m",
        "trainer",
        "--config",
        "runs/e2e/job/config.yaml",
    ]

    again = cli("launch", *FAST, "trainer.max_steps=4")
    assert again.code == 0, again.err + again.out[-2000:]
    assert "resuming" in again.out
    steps = logged_steps(run_dir)
    assert [r["step"] for r in steps] == [1, 2, 3, 4]  # resumed at 3, not restarted at 1
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert (run_dir / "checkpoints" / "step-00000004" / "COMMITTED").is_file()

    backend = LocalBackend("runs")
    status = backend.status("e2e")
    assert (status.state, status.exit_code, status.last_step) == (SUCCEEDED, 0, 4)
    assert [r.run_id for r in backend.list_runs(state=SUCCEEDED)] == ["e2e"]
    assert backend.list_runs(sweep_id="other") == []
    rank0, rank1 = list(backend.logs("e2e", rank=0)), list(backend.logs("e2e", rank=1))
    assert any(line.startswith("[default0]:") for line in rank0)
    assert not any(line.startswith("[default0]:") for line in rank1)  # rank 1 prints nothing
    backend.cancel("e2e")  # finished: a no-op
    backend.cancel("no-such-run")
    assert backend.status("e2e").state == SUCCEEDED


def test_local_launch_path_stays_light(tmp_path):
    """No Kubernetes client, kubeflow, schema validator or torch in the launcher's processes
    (`trainstack launch` and the Hydra app it execs): Python's own import log of both."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.launch", "--dryrun", f"data.path={SAMPLE_DATA}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "jobs" in imported and "hydra" in imported  # the log is the app's, not only the shim's
    heavy = {"kubernetes", "kubeflow", "kubernetes_validate", "jsonschema", "torch"}
    assert not imported & heavy


@pytest.mark.slow
def test_cancel_stops_a_running_local_run_after_a_checkpoint(workdir):
    import time
    from datetime import UTC, datetime

    from jobs.backends.base import CANCELLED
    from jobs.compose import compose
    from jobs.materialize import materialize

    overrides = [*FAST[:-1], "run_id=cancel-me", "trainer.max_steps=10000"]
    job = materialize(compose(overrides), now=datetime.now(UTC), git_sha=None)
    backend = LocalBackend("runs")
    backend.schedule(backend.dryrun(job))
    run_dir = workdir / "runs" / "cancel-me"
    deadline = time.monotonic() + 120
    while backend.status("cancel-me").last_step is None:
        assert time.monotonic() < deadline, (run_dir / "job" / "output.log").read_text()
        time.sleep(0.1)
    backend.cancel("cancel-me")
    backend.cancel("cancel-me")  # idempotent
    while not backend.status("cancel-me").finished:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status = backend.status("cancel-me")
    assert (status.state, status.exit_code) == (CANCELLED, 143)
    # The trainer saved where it stopped (SIGTERM -> checkpoint), so a relaunch resumes.
    assert list((run_dir / "checkpoints").glob("step-*/COMMITTED"))
    backend.cancel("cancel-me")  # finished: still a no-op


@pytest.mark.timeout(20)
def test_local_logs_keep_bytes_and_end_on_an_unfinished_last_line(tmp_path):
    """torchrun output may hold CRLF, non-ASCII text and, when a worker dies mid-write, a last
    line without its newline: every line comes once, and following a finished run ends."""
    state_dir = tmp_path / "r1"
    run_state.write_state(state_dir, {"run_id": "r1", "backend": "local", "state": RUNNING})
    run_state.update_state(state_dir, supervisor_pid=os.getpid())
    log = state_dir / run_state.OUTPUT_LOG
    log.write_bytes(b"[default0]: step 1\r\nlauncher \xe2\x9c\x93\n[default0]: step 2 \xe2\x9c")
    backend = LocalBackend(str(tmp_path))
    complete = ["[default0]: step 1", "launcher \u2713"]
    assert list(backend.logs("r1")) == complete  # still running: the partial line waits
    run_state.update_state(state_dir, state=SUCCEEDED)
    log.write_bytes(log.read_bytes() + b"\x93 done")
    assert list(backend.logs("r1", follow=True)) == [*complete, "[default0]: step 2 \u2713 done"]
