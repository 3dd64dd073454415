"""Recovery on the local backend with nobody following the run: a SIGKILLed rank restarts the
job by itself (torchrun --max-restarts from job.max_restarts) with exactly the losses of an
uninterrupted run; a SIGKILLed supervisor takes its ranks with it, and a relaunch resumes."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs.backends import run_state
from jobs.backends.base import SUCCEEDED
from jobs.backends.local.backend import LocalBackend
from testing_support.overrides import SMALL_MODEL
from tests.procs import processes, ranks_of
from tests.trainer.harness import SAMPLE, SMALL_CORPUS_DOCS, losses_by_step
from trainer.faults import STEP_DELAY_ENV


def small_job(workdir: Path, run_id: str, *extra: str):
    from jobs.compose import compose
    from jobs.materialize import materialize

    corpus = workdir / "corpus.jsonl"
    if not corpus.exists():
        corpus.write_text("".join(SAMPLE.read_text().splitlines(True)[:SMALL_CORPUS_DOCS]))
    overrides = [
        *SMALL_MODEL,
        f"data.path={corpus}",
        "trainer.max_steps=12",
        "trainer.checkpoint.interval=3",
        f"run_id={run_id}",
        *extra,
    ]
    return materialize(compose(overrides), now=datetime.now(UTC), git_sha=None)


def start(backend: LocalBackend, job) -> None:
    backend.schedule(backend.dryrun(job))


def wait_until(condition, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def finished(backend: LocalBackend, run_id: str):
    wait_until(lambda: backend.status(run_id).finished, f"{run_id} to finish")
    return backend.status(run_id)


@pytest.mark.slow
def test_a_sigkilled_rank_restarts_the_job_by_itself_with_identical_losses(workdir, monkeypatch):
    """The uninterrupted reference runs beside the killed run (which mostly sleeps between its
    slowed steps): the same losses whichever order the two take the CPUs in."""
    backend = LocalBackend("runs")
    start(backend, small_job(workdir, "reference"))

    monkeypatch.setenv(STEP_DELAY_ENV, "0.25")  # slow steps: the kill lands mid-run
    start(backend, small_job(workdir, "killed"))
    wait_until(lambda: (backend.status("killed").last_step or 0) >= 5, "step 5")
    victim = ranks_of("killed")[1]
    os.kill(victim, signal.SIGKILL)

    assert finished(backend, "reference").state == SUCCEEDED
    reference = losses_by_step(str(workdir / "runs" / "reference"))
    assert sorted(reference) == list(range(1, 13))

    status = finished(backend, "killed")
    output = (workdir / "runs" / "killed" / run_state.OUTPUT_LOG).read_text()
    assert (status.state, status.exit_code) == (SUCCEEDED, 0), output[-3000:]
    assert "resumed from" in output  # torchrun restarted the ranks; no client was involved
    assert losses_by_step(str(workdir / "runs" / "killed")) == reference  # bit for bit
    assert victim not in {p.pid for p in processes()}


@pytest.mark.slow
def test_ranks_die_with_a_killed_supervisor_and_a_relaunch_resumes(workdir, monkeypatch):
    backend = LocalBackend("runs")
    monkeypatch.setenv(STEP_DELAY_ENV, "0.25")
    job = small_job(workdir, "orphan")
    start(backend, job)
    wait_until(lambda: (backend.status("orphan").last_step or 0) >= 4, "step 4")
    supervisor = run_state.read_state(workdir / "runs" / "orphan")["supervisor_pid"]
    assert len(ranks_of("orphan")) == 2
    os.kill(supervisor, signal.SIGKILL)

    # torchrun gets SIGTERM from the kernel, forwards it; the ranks checkpoint and exit.
    wait_until(lambda: not processes(TRAINSTACK_RUN_ID="orphan"), "the run's processes to end", 60)
    assert backend.status("orphan").state == "failed"  # the supervisor vanished
    run_dir = workdir / "runs" / "orphan"
    committed = sorted(p.parent.name for p in run_dir.glob("checkpoints/step-*/COMMITTED"))
    assert committed

    monkeypatch.delenv(STEP_DELAY_ENV)
    start(backend, job)
    status = finished(backend, "orphan")
    output = (run_dir / run_state.OUTPUT_LOG).read_text()
    assert status.state == SUCCEEDED, output[-3000:]
    assert f"resumed from runs/orphan/checkpoints/{committed[-1]} at step" in output
