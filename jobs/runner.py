"""The `runner` group -> what every process of the job runs: one pure function,
`runner_program`, that every job kind consumes (the PyTorchJob's container command, the local
backend's argv, a TrainJob's trainer command and args).

Runners:
- trainstack: the built-in trainer under `trainer.launch` (torchrun keeping its exit codes).
- command: the user's program, under the same launcher (`runner.torchrun`, default) or once
  per node as is, started by `trainer.runner_exec` (which fetches and verifies the workdir
  archive, writes the run record and keeps metrics in the run dir).
- hf: `trainer.runners.hf` (transformers.Trainer) under the launcher, through runner_exec too.

The job contract every non-built-in runner gets (`contract_env`): TRAINSTACK_RUN_ID,
TRAINSTACK_RUN_DIR, TRAINSTACK_CHECKPOINT_DIR (always a local directory for runner=command),
TRAINSTACK_CHECKPOINT_URI (where its checkpoints are kept: the same path, or s3://),
TRAINSTACK_METRICS, plus torchrun's rank env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.run_dir import CHECKPOINTS, METRICS_FILE
from contract.run_dir import CODE_DIR as CODE_PREFIX

TRAINSTACK = "trainstack"
COMMAND = "command"
HF = "hf"

RUNNER_KEYS = {
    TRAINSTACK: frozenset({"name"}),
    COMMAND: frozenset({"name", "command", "args", "env", "torchrun", "workdir", "workdir_max_mb"}),
    HF: frozenset({"name", "env", "peft"}),
}
"""runner.* keys each runner reads (`code` is the launcher's); any other one set is refused."""

SCRATCH_DIR = "/opt/trainstack"
"""An emptyDir in the pod (non-built-in runners): the unpacked workdir and the metrics file."""
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
class RunnerProgram:
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


def format_word(value: Any) -> str:
    """A value as a command-line word (booleans as true/false, as YAML wrote them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_arg(key: str, value: Any) -> str:
    """`runner.args` entry -> `--key=value`."""
    return f"--{key}={format_word(value)}"


def user_program(runner: Any) -> tuple[str, ...]:
    """runner=command: the command then `--key=value` for each of runner.args, in key order
    (so the same sweep point always gets the same line)."""
    args = runner.args or {}
    return tuple(runner.command) + tuple(format_arg(k, args[k]) for k in sorted(args))


def metrics_path(run_dir: str) -> str:
    return POD_METRICS if "://" in run_dir else f"{run_dir.rstrip('/')}/{METRICS_FILE}"


def contract_env(run_dir: str, runner_name: str) -> dict[str, str]:
    """What a non-built-in runner is told beyond TRAINSTACK_RUN_ID/RUN_DIR (the job's env).
    runner=hf reads and writes s3:// checkpoints itself (trainer.runners.hf)."""
    uri = f"{run_dir.rstrip('/')}/{CHECKPOINTS}"
    mirrored = "://" in run_dir and runner_name == COMMAND
    return {
        "TRAINSTACK_CHECKPOINT_DIR": POD_CHECKPOINTS if mirrored else uri,
        "TRAINSTACK_CHECKPOINT_URI": uri,
        "TRAINSTACK_METRICS": metrics_path(run_dir),
    }


def runner_program(
    runner: Any,
    *,
    run_dir: str,
    shutdown_timeout_s: int,
    max_restarts: int,
    config_path: str,
    code: CodeArchive | None = None,
) -> RunnerProgram:
    """The (command, args, env) of composed `runner` for a job writing to `run_dir`. Pure."""
    torchrun = launcher(shutdown_timeout_s, max_restarts)
    if runner.name == TRAINSTACK:
        return RunnerProgram(torchrun, ("-m", "trainer", "--config", config_path), {})
    wrapper = ["python", "-m", "trainer.runner_exec", "--config", config_path]
    if code is not None:
        wrapper += ["--code", code.uri, "--sha256", code.sha256, "--into", CODE_DIR]
    wrapper.append("--")
    env = {**contract_env(run_dir, runner.name), **dict(runner.env or {})}
    if runner.name == HF or runner.torchrun:
        env.update(FRESH_STORE_ENV)
    if runner.name == HF:
        program = ("-m", "trainer.runners.hf", "--config", config_path)
        return RunnerProgram((*wrapper, *torchrun), program, env)
    if runner.torchrun:
        return RunnerProgram((*wrapper, *torchrun, "--no-python"), user_program(runner), env)
    return RunnerProgram(tuple(wrapper), user_program(runner), env)


def describe(cfg: Any) -> str:
    """The plan's line: which runner and what it runs (runner=hf: and how it evaluates, which
    the built-in trainer's plan says in its own lines)."""
    runner = cfg.runner
    if runner.name == TRAINSTACK:
        return "trainstack (built-in trainer)"
    if runner.name == HF:
        lora = f", LoRA r={runner.peft.r}" if runner.peft.r else ""
        trainer = cfg.trainer
        evals = (
            f"eval every {trainer.eval_interval} steps on {trainer.eval_batches} x "
            f"{trainer.micro_batch_size} windows per rank (trainer.eval_interval, eval_batches)"
            if trainer.eval_interval > 0
            else "no eval (trainer.eval_interval=0)"
        )
        return f"hf (transformers.Trainer{lora}); {evals}"
    import shlex

    how = "under torchrun" if runner.torchrun else "once per node"
    code = f", workdir {runner.workdir} ({runner.code[:12]})" if runner.code else ""
    return f"command {how}: {shlex.join(user_program(runner))}{code}"


def job_label(cfg: Any) -> str:
    """What the run is named and labelled after: the model, or `command` for a program whose
    model trainstack does not know."""
    from trainer.job_config import model_label

    return COMMAND if cfg.runner.name == COMMAND else model_label(cfg)
