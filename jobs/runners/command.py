"""runner=command: the user's program, under the same launcher as the built-in trainer
(`runner.torchrun`, default) or once per node as is, started by `trainer.runner_exec`. It
gets the job contract (jobs.runners.program.contract_env; TRAINSTACK_CHECKPOINT_DIR is
always a local directory) and `runner.args` as `--key=value`."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from jobs.backend_registry import traits_of
from jobs.errors import JobConfigError
from jobs.runners.base import Runner, RunnerOptions, check_env, plain
from jobs.runners.program import format_arg

ARG_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


@dataclass
class CommandOptions(RunnerOptions):
    name: str = "command"
    command: Any = None
    """The program and its arguments, a list (`[python,-u,train.py]`) or one string split as
    a shell would (`'python -u train.py'`); the launcher records the list."""
    args: dict[str, Any] = field(default_factory=dict)
    """Appended as `--key=value` in key order (`+runner.args.lr=1e-4` sweeps them)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of every process (not TRAINSTACK_*/PET_*)."""
    torchrun: bool = True
    """Start one process per GPU (CPU slot) through torchrun with the job's nodes and
    rendezvous; false runs the command once per node as is (accelerate launch, NeMo)."""
    workdir: str | None = None
    """A local directory shipped with the job (packed, hashed, unpacked in the pod); the
    program starts in its copy."""
    workdir_max_mb: int = 100
    """Refuse a packed workdir larger than this many MiB (compressed)."""
    code: str | None = None


def user_program(options: Any) -> tuple[str, ...]:
    """The command then `--key=value` for each of runner.args, in key order (so the same
    sweep point always gets the same line)."""
    args = options.args or {}
    return tuple(options.command) + tuple(format_arg(k, args[k]) for k in sorted(args))


def check_command(cfg: Any) -> None:
    options = cfg.runner
    command = plain(options.command)
    listed = isinstance(command, list) and all(isinstance(a, str) and a for a in command)
    if not command or not listed:
        problem = "is not set" if command is None else "is empty" if not command else None
        problem = problem or f"{command!r} is not a program and its arguments"
        raise JobConfigError(
            "runner.command",
            f"{problem}; allowed: a list, e.g. 'runner.command=[python,-u,train.py]', or "
            "one string split as a shell would, e.g. 'runner.command=python -u train.py'",
        )
    if command[0].startswith("-"):
        # Under torchrun the command follows the launcher's own options: a leading `-` would
        # be read as one of them (--rdzv-endpoint, --nproc-per-node), not as the program.
        raise JobConfigError(
            "runner.command",
            f"starts with an option ({command[0][:40]!r}); allowed: the program first, e.g. "
            "'runner.command=[python,-u,train.py]'",
        )
    for key, value in plain(options.args).items():
        if not ARG_KEY.match(str(key)):
            raise JobConfigError(
                f"runner.args.{key}", "is not a flag name; allowed: [A-Za-z0-9][A-Za-z0-9_.-]*"
            )
        if value is None or isinstance(value, dict | list):
            raise JobConfigError(
                f"runner.args.{key}",
                f"{value!r} is not a single value; allowed: a string, number or boolean "
                "(passed as --key=value)",
            )
    remote_pods = traits_of(cfg.backend.name).pods
    if options.workdir is not None and remote_pods and not cfg.storage.root.startswith("s3://"):
        raise JobConfigError(
            "storage.root",
            f"runner.workdir ships the code through the run dir, which the pods must read; "
            f"allowed with backend={cfg.backend.name}: s3://bucket/prefix",
        )
    if options.workdir_max_mb < 1:
        raise JobConfigError("runner.workdir_max_mb", f"must be >= 1, got {options.workdir_max_mb}")


class Command(Runner):
    options = CommandOptions
    reads_model = False
    mirrors_checkpoints = True

    def check(self, cfg: Any) -> None:
        check_env(cfg.runner)
        check_command(cfg)
        if cfg.model.init_from is not None:  # its config carries no model section
            raise JobConfigError(
                "model.init_from",
                "runner=command does not read it (your command loads its own model); "
                "allowed: null, or runner=trainstack|hf",
            )

    def describe(self, cfg: Any) -> str:
        options = cfg.runner
        how = "under torchrun" if options.torchrun else "once per node"
        code = f", workdir {options.workdir} ({options.code[:12]})" if options.code else ""
        return f"command {how}: {shlex.join(user_program(options))}{code}"

    def wrapped(
        self, options: Any, torchrun: tuple[str, ...], config_path: str
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if options.torchrun:
            return (*torchrun, "--no-python"), user_program(options)
        return (), user_program(options)


RUNNER = Command()
