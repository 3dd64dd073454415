"""The pod program: what every process of a job runs, as `(command, args, env)`, built by the
job's runner (`jobs.runners`) and consumed by every job kind (the PyTorchJob's container
command, the local backend's argv, a TrainJob's trainer command and args).

The pieces every runner shares live here: torchrun under `trainer.launch` (`launcher`), the
wrapper that starts a runner's own program (`trainer.runner_exec`: fetches and verifies the
workdir archive, writes the run record, keeps metrics in the run dir) and the job contract a
wrapped program is told (`contract_env`): TRAINSTACK_RUN_ID, TRAINSTACK_RUN_DIR,
TRAINSTACK_CHECKPOINT_DIR, TRAINSTACK_CHECKPOINT_URI (where its checkpoints are kept: the same
path, or s3://), TRAINSTACK_METRICS, plus torchrun's rank env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.run_dir import CHECKPOINTS, METRICS_FILE
from contract.run_dir import CODE_DIR as CODE_PREFIX

SCRATCH_DIR = "/opt/trainstack"
"""An emptyDir in the pod (wrapped runners): the unpacked workdir and the metrics file."""
CODE_DIR = f"{SCRATCH_DIR}/code"
"""Where the workdir is unpacked in the pod; the program starts there."""
POD_METRICS = f"{SCRATCH_DIR}/{METRICS_FILE}"
"""TRAINSTACK_METRICS when the run dir is s3://: runner_exec copies it there as it grows."""
POD_CHECKPOINTS = f"{SCRATCH_DIR}/checkpoints"
"""runner=command's TRAINSTACK_CHECKPOINT_DIR when the run dir is s3://: runner_exec restores
it from `<run dir>/checkpoints` before the program starts and uploads what the program saves
(trainer.runner_sync), so a program that only knows files works on a cluster."""
FRESH_STORE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""torchrun's documented opt-out of sharing its rendezvous store with the workers: each round
(every restart) gets a new store on worker rank 0, so a restarted program never reads the
process-group keys of the round before (a dead peer's address: it would hang connecting).
The built-in trainer prefixes its keys per round instead (trainer.distributed)."""


@dataclass(frozen=True)
class CodeArchive:
    """A packed `runner.workdir`, stored once per run dir."""

    sha256: str
    uri: str
    """`<run_dir>/code/<sha256>.tar.gz`."""


@dataclass(frozen=True)
class PodProgram:
    """What the container runs: `command` (launcher: runner_exec, torchrun) then `args` (the
    program), with `env` added to the job's."""

    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command + self.args


def code_archive(run_dir: str, sha256: str | None) -> CodeArchive | None:
    if sha256 is None:
        return None
    return CodeArchive(sha256, f"{run_dir.rstrip('/')}/{CODE_PREFIX}/{sha256}.tar.gz")


def launcher(shutdown_timeout_s: int, max_restarts: int) -> tuple[str, ...]:
    """torchrun through `trainer.launch`, which exits with the program's code (143 preempted,
    129 peer lost: the `ExitCode` restart policy retries; 2 bad input: it doesn't) where plain
    torchrun exits 1, and restarts a node's ranks together up to `max_restarts` times (never
    after bad input). Nodes, ranks, rendezvous and processes per node come from the PET_*
    variables the operator sets (and the local backend sets the same way)."""
    return (
        "python",
        "-m",
        "trainer.launch",
        f"--shutdown-timeout={shutdown_timeout_s}",
        f"--max-restarts={max_restarts}",
    )


def start_counter(max_restarts: int) -> tuple[str, ...]:
    """`trainer.pod_starts`, a PyTorchJob pod's first step: it counts the replica's starts in
    the run dir and exits 2 (which the `ExitCode` policy does not retry) past `max_restarts`
    recreations, which nothing in the Training Operator bounds (see that module). Then PROGRAM.
    A TrainJob's JobSet counts its own restarts: its pods do not get this."""
    return ("python", "-m", "trainer.pod_starts", f"--max-restarts={max_restarts}", "--")


def exec_wrapper(config_path: str, code: CodeArchive | None) -> tuple[str, ...]:
    """`trainer.runner_exec`, which starts a runner's own program (after `--`): it fetches and
    unpacks `code` into CODE_DIR first, where there is one."""
    wrapper = ["python", "-m", "trainer.runner_exec", "--config", config_path]
    if code is not None:
        wrapper += ["--code", code.uri, "--sha256", code.sha256, "--into", CODE_DIR]
    wrapper.append("--")
    return tuple(wrapper)


def format_word(value: Any) -> str:
    """A value as a command-line word (booleans as true/false, as YAML wrote them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_arg(key: str, value: Any) -> str:
    """`runner.args` entry -> `--key=value`."""
    return f"--{key}={format_word(value)}"


def metrics_path(run_dir: str) -> str:
    return POD_METRICS if "://" in run_dir else f"{run_dir.rstrip('/')}/{METRICS_FILE}"


def contract_env(run_dir: str, *, mirrored_checkpoints: bool) -> dict[str, str]:
    """What a wrapped runner's program is told beyond TRAINSTACK_RUN_ID/RUN_DIR (the job's
    env). `mirrored_checkpoints`: the program only knows local files, so on an s3:// run dir
    its checkpoints live in POD_CHECKPOINTS and runner_exec mirrors them (runner=command);
    otherwise it reads and writes the URI itself (runner=hf)."""
    uri = f"{run_dir.rstrip('/')}/{CHECKPOINTS}"
    mirrored = "://" in run_dir and mirrored_checkpoints
    return {
        "TRAINSTACK_CHECKPOINT_DIR": POD_CHECKPOINTS if mirrored else uri,
        "TRAINSTACK_CHECKPOINT_URI": uri,
        "TRAINSTACK_METRICS": metrics_path(run_dir),
    }
