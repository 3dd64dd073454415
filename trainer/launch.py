"""`python -m trainer.launch [torchrun options] -m trainer --config ...`: torchrun that keeps
the trainer's exit codes.

torchrun exits 1 whenever a worker fails, and also when it is itself stopped by SIGTERM — even
though the trainer then checkpointed and exited 143 — so a pod running plain torchrun cannot
tell "restart me" (143) from "fix me" (2). This runs the same launcher in-process (same options,
same SIGTERM forwarding to the workers) and maps the outcome:

- 143 (`EXIT_PREEMPTED`) when the launcher got SIGTERM, or the first worker to fail exited 143
  (or died of SIGTERM);
- 2 (`EXIT_BAD_INPUT`) when the first worker to fail exited 2;
- 128+N when the first worker to fail was killed by signal N (137: SIGKILL, the OOM killer);
- otherwise 0 when done, 1 for any other failure, 128+N when the launcher got signal N.

- 129 (`EXIT_PEER_LOST`) when the rendezvous lost its store or peers (another pod died);
- otherwise 0 when done, 1 for any other failure, 128+N when the launcher got signal N.

Only the FIRST failure counts: once a worker fails, torchrun stops the others with SIGTERM, so
their codes say nothing about the cause.

Recovery inside the pod: `--max-restarts=N` (job.max_restarts) lets torchrun restart all local
ranks together when one dies (SIGKILL, OOM); they resume from the last committed checkpoint.
Bad input (exit 2) is never restarted: the same config would fail the same way.

Node ranks: a fixed-size multi-node job uses torchrun's static rendezvous, so node rank N is
the operator's `PET_NODE_RANK` (`rendezvous_env`): a TrainJob's pod of completion index N
(Trainer v2.3.0 sets PET_NODE_RANK from `batch.kubernetes.io/job-completion-index`:
kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go), a PyTorchJob's master 0 and
worker i+1. That is the pod `trainstack logs --rank N` reads. c10d would instead number nodes
by their sorted host names (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
`_mark_rendezvous_complete`: `sorted(state.participants)`), and `...-node-0-10` sorts before
`...-node-0-2`: from 11 nodes up, rank N would be another pod. The price: when one node's
ranks restart in their pod, the other nodes do not join a new round, so a multi-node job
recovers through its pods (JobSet or the operator recreates them, all resuming from the last
checkpoint) rather than inside them. Elastic PyTorchJobs keep the operator's c10d rendezvous
(membership changes between rounds): their node ranks follow host names, not pod indices.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping

from torch.distributed import DistNetworkError
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous.api import RendezvousError
from torch.distributed.run import main as torchrun

from contract.config import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_PEER_LOST, EXIT_PREEMPTED
from contract.run_dir import RESTARTS_FILE_ENV
from trainer.lifeline import AGENT_PID_ENV


def exit_code_for(first_failure_code: int) -> int:
    """The job's exit code from the exit code of the first worker that failed."""
    if first_failure_code in (EXIT_PREEMPTED, -signal.SIGTERM):
        return EXIT_PREEMPTED
    if first_failure_code == EXIT_BAD_INPUT:
        return EXIT_BAD_INPUT
    if first_failure_code < 0:  # killed by a signal (OOM killer: SIGKILL): retryable, as a
        return 128 - first_failure_code  # shell or kubelet would report it
    return EXIT_FAILED


def rendezvous_env(environ: Mapping[str, str]) -> dict[str, str]:
    """PET_* variables that pin an operator-launched job to torchrun's static rendezvous, where
    node rank is the operator's PET_NODE_RANK (see the module docstring); empty when a
    rendezvous is already chosen (an elastic job's c10d endpoint, `--standalone` here) or the
    job has one node."""
    if environ.get("PET_RDZV_ENDPOINT") or environ.get("PET_STANDALONE"):
        return {}
    if environ.get("PET_NNODES", "1") == "1" or "PET_NODE_RANK" not in environ:
        return {}
    return {"PET_RDZV_BACKEND": "static"}


def _never_restart_bad_input(agent_class: type) -> None:
    """torchrun restarts a failed worker group whatever the exit code; a worker that exited 2
    (bad input) would fail identically, so its agent gets no restarts left."""
    monitor = agent_class._monitor_workers
    if getattr(monitor, "trainstack_wrapped", False):
        return

    def _monitor_workers(self, worker_group):
        result = monitor(self, worker_group)
        if result.is_failed() and any(
            f.exitcode == EXIT_BAD_INPUT for f in result.failures.values()
        ):
            self._remaining_restarts = 0
        return result

    _monitor_workers.trainstack_wrapped = True  # type: ignore[attr-defined]
    agent_class._monitor_workers = _monitor_workers


def _record_restarts(agent_class: type) -> None:
    """Each start of the workers writes torchrun's own count of restarts so far (max_restarts
    minus what is left, as its `restart_count`) to RESTARTS_FILE_ENV's file."""
    start = agent_class._start_workers
    if getattr(start, "trainstack_restarts", False):
        return

    def _start_workers(self, worker_group):
        path = os.environ.get(RESTARTS_FILE_ENV)
        if path:
            done = worker_group.spec.max_restarts - self._remaining_restarts
            try:
                with open(path, "w") as f:
                    f.write(f"{done}\n")
            except OSError:  # bookkeeping: never the reason a run stops
                pass
        return start(self, worker_group)

    _start_workers.trainstack_restarts = True  # type: ignore[attr-defined]
    agent_class._start_workers = _start_workers


ROUND_ENV = "TRAINSTACK_RDZV_ROUND"
"""The rendezvous round the workers were started in (the same on every node of a round)."""


def _tell_workers_the_round(agent_class: type) -> None:
    """With c10d rendezvous the workers share the agent's TCPStore across restarts, so a
    restarted rank can read its peer's address from the round before (a dead process) and hang
    connecting to it. The round number lets `trainer.distributed` prefix its keys per round."""
    start = agent_class._start_workers
    if getattr(start, "trainstack_wrapped", False):
        return

    def _start_workers(self, worker_group):
        handler = worker_group.spec.rdzv_handler
        holder = getattr(handler, "_state_holder", None)
        state = getattr(holder, "state", None)
        os.environ[ROUND_ENV] = str(getattr(state, "round", "static"))
        return start(self, worker_group)

    _start_workers.trainstack_wrapped = True  # type: ignore[attr-defined]
    agent_class._start_workers = _start_workers


def main(argv: list[str] | None = None) -> int:
    os.environ.update(rendezvous_env(os.environ))
    os.environ[AGENT_PID_ENV] = str(os.getpid())  # the workers' parent: see trainer.lifeline
    _never_restart_bad_input(LocalElasticAgent)
    _tell_workers_the_round(LocalElasticAgent)
    _record_restarts(LocalElasticAgent)
    try:
        torchrun(argv)
    except SignalException as exc:
        return EXIT_PREEMPTED if exc.sigval == signal.SIGTERM else 128 + int(exc.sigval)
    except ChildFailedError as exc:
        _, first = exc.get_first_failure()
        return exit_code_for(first.exitcode)
    except (RendezvousError, DistNetworkError) as exc:
        reason = " ".join(str(exc).split())[:300]
        print(f"[trainer.launch] lost the rendezvous: {reason}", file=sys.stderr, flush=True)
        return EXIT_PEER_LOST
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
