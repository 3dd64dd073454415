"""No orphans and in-pod recovery at the launcher: ranks die with a SIGKILLed torchrun agent; a
relaunch resumes; fixed-size multi-node jobs rendezvous statically, so node rank is the pod's
index (what `logs --rank N` reads), with 12 nodes too; the suite's leftover check works."""

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
        # Trainer's (or the operator's) non-elastic multi-node pod: static, PET_NODE_RANK.
        (
            {"PET_MASTER_ADDR": "r1-node-0-0.r1", "PET_MASTER_PORT": "29400", "PET_NNODES": "4"}
            | {"PET_NODE_RANK": "3", "TRAINSTACK_RUN_ID": "r1"},
            {"PET_RDZV_BACKEND": "static"},
        ),
        # One node, an elastic job (operator chose c10d), the local backend (standalone).
        ({"PET_MASTER_ADDR": "m", "PET_MASTER_PORT": "1", "PET_NNODES": "1"}, {}),
        ({"PET_RDZV_ENDPOINT": "w-0:29400", "PET_NNODES": "2:4"}, {}),
        ({"PET_STANDALONE": "1", "PET_NNODES": "1"}, {}),
    ],
)
def test_fixed_size_multi_node_jobs_rendezvous_statically(environ, expected):
    assert rendezvous_env(environ) == expected


def torchrun_node_rank(environ: dict[str, str], fqdns: list[str], fqdn: str) -> int:
    """The node rank torchrun gives the agent on host `fqdn` with `environ`: static rendezvous
    takes PET_NODE_RANK (torch/distributed/run.py, `--node-rank`); c10d (dynamic) numbers the
    agents in the order of their node descriptors, host name first
    (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, `_mark_rendezvous_complete`:
    `for rank, node in enumerate(sorted(state.participants))`), here with torch's own class."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc

    if environ.get("PET_RDZV_BACKEND", "static") == "static":
        return int(environ["PET_NODE_RANK"])
    nodes = sorted(_NodeDesc(host, 1000, 0) for host in fqdns)
    return [node.addr for node in nodes].index(fqdn)


def test_node_rank_is_the_pods_completion_index_with_12_nodes():
    """`trainstack logs --rank N` reads the pod of completion index N
    (jobs/backends/kubernetes/client/watch.py);
    the trainer's node rank N must run there. JobSet names the hosts
    `<jobset>-<replicated job>-<job index>-<pod index>.<subdomain>`; Trainer sets
    PET_NODE_RANK from the completion index (kubeflow/trainer v2.3.0, plugins/torch/torch.go)."""
    nodes = 12
    fqdns = [f"run12-node-0-{index}.run12" for index in range(nodes)]
    for index, fqdn in enumerate(fqdns):
        environ = {
            "PET_MASTER_ADDR": "run12-node-0-0.run12",
            "PET_MASTER_PORT": "29400",
            "PET_NNODES": str(nodes),
            "PET_NODE_RANK": str(index),
            "TRAINSTACK_RUN_ID": "run12",
        }
        environ |= rendezvous_env(environ)
        assert torchrun_node_rank(environ, fqdns, fqdn) == index, fqdn


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
