"""No orphans and in-pod recovery at the launcher: ranks die with a SIGKILLed torchrun agent; a
relaunch resumes; multi-node jobs rendezvous through c10d; the suite's leftover check works."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import leftover_trainer_processes
from tests.procs import processes, ranks_of
from tests.trainer.harness import committed_steps, losses_by_step
from trainer.faults import STEP_DELAY_ENV
from trainer.launch import rendezvous_env


def wait_until(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_ranks_die_with_a_sigkilled_agent_and_a_relaunch_resumes(start_trainer, tmp_path):
    env = {STEP_DELAY_ENV: "0.25", "TRAINSTACK_RUN_ID": "agent-kill"}
    overrides = ["trainer.max_steps=10", "trainer.checkpoint.interval=3"]
    trainer = start_trainer(2, overrides, env=env, launcher="trainer.launch")
    run_dir = tmp_path / "run"
    trainer.wait_for(lambda: bool(committed_steps(run_dir)))
    ranks = ranks_of("agent-kill")
    assert sorted(ranks) == [0, 1]
    trainer.proc.send_signal(signal.SIGKILL)  # the agent alone, as `kill -9 <torchrun>`
    trainer.proc.wait(timeout=30)
    # Workers sit in their own sessions; the parent-death signal ends them anyway.
    wait_until(lambda: not set(ranks.values()) & {p.pid for p in processes()}, "ranks to die", 15)
    saved = committed_steps(run_dir)[-1]

    again = start_trainer(2, overrides, env={"TRAINSTACK_RUN_ID": "agent-kill"}).finish()
    assert again.returncode == 0, again.stderr
    assert f"at step {saved}" in again.stdout
    assert sorted(losses_by_step(str(run_dir))) == list(range(1, 11))


@pytest.mark.parametrize(
    "environ, expected",
    [
        # The operator's non-elastic multi-node pod: c10d on the master's service.
        (
            {"PET_MASTER_ADDR": "r1-master-0", "PET_MASTER_PORT": "23456", "PET_NNODES": "4"}
            | {"TRAINSTACK_RUN_ID": "r1"},
            {
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": "r1-master-0:23456",
                "PET_RDZV_ID": "r1",
            },
        ),
        # One node, an elastic job (operator chose c10d), the local backend (standalone).
        ({"PET_MASTER_ADDR": "m", "PET_MASTER_PORT": "1", "PET_NNODES": "1"}, {}),
        ({"PET_RDZV_ENDPOINT": "w-0:29400", "PET_NNODES": "2:4"}, {}),
        ({"PET_STANDALONE": "1", "PET_NNODES": "1"}, {}),
    ],
)
def test_multi_node_jobs_rendezvous_through_c10d(environ, expected):
    assert rendezvous_env(environ) == expected


def test_the_leftover_check_finds_a_trainer_process_of_this_session():
    # argv shaped like a rank ("-m trainer"), alive for a while: what the session check hunts.
    code = "import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, "-m", "trainer"])
    wait_until(lambda: b"-m\0trainer" in Path(f"/proc/{proc.pid}/cmdline").read_bytes(), "exec")
    try:
        found = leftover_trainer_processes(grace_s=0.5)
        assert proc.pid in {p.pid for p in found}
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in {p.pid for p in leftover_trainer_processes(grace_s=0)}
