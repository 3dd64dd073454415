"""Checks of the `runner` section (jobs/runner.py): each raises `JobConfigError` (one line:
the key, the problem, what is allowed) before anything is packed, written or started."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from jobs.errors import JobConfigError
from jobs.runner import COMMAND, HF, RUNNER_KEYS
from jobs.schema import RUNNERS, RunnerConfig

ARG_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED_ENV_PREFIXES = ("TRAINSTACK_", "PET_")
"""Set by trainstack and the operator: the contract and the rendezvous."""
RESERVED_ENV = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED"}
    | {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
)


def _plain(value: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _defaults() -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(RunnerConfig))  # type: ignore[return-value]


def check_foreign_keys(runner: Any) -> None:
    """A key another runner reads, set here, would be silently ignored: refuse it."""
    mine = RUNNER_KEYS[runner.name]
    defaults = _defaults()
    for field in dataclasses.fields(RunnerConfig):
        if field.name in mine or field.name == "code":
            continue
        if _plain(runner[field.name]) != defaults[field.name]:
            raise JobConfigError(
                f"runner.{field.name}",
                f"is not a key of runner={runner.name}; allowed: {', '.join(sorted(mine))}",
            )


def check_env(runner: Any) -> None:
    for name in runner.env:
        if not ENV_NAME.match(name):
            raise JobConfigError(
                f"runner.env.{name}",
                "is not an environment variable name; allowed: [A-Za-z_][A-Za-z0-9_]*",
            )
        if name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV:
            raise JobConfigError(
                f"runner.env.{name}",
                "is set by trainstack or torchrun (the job contract); allowed: other names",
            )


def check_command(cfg: Any) -> None:
    runner = cfg.runner
    command = _plain(runner.command)
    if not command or not all(isinstance(a, str) and a for a in command):
        raise JobConfigError(
            "runner.command",
            f"{'is not set' if command is None else 'is empty'}; allowed: the program and "
            "its arguments as a list, e.g. 'runner.command=[python,-u,train.py]'",
        )
    if command[0].startswith("-"):
        # Under torchrun the command follows the launcher's own options: a leading `-` would
        # be read as one of them (--rdzv-endpoint, --nproc-per-node), not as the program.
        raise JobConfigError(
            "runner.command",
            f"starts with an option ({command[0][:40]!r}); allowed: the program first, e.g. "
            "'runner.command=[python,-u,train.py]'",
        )
    for key, value in _plain(runner.args).items():
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
    remote_pods = cfg.backend.name != "local"
    if runner.workdir is not None and remote_pods and not cfg.storage.root.startswith("s3://"):
        raise JobConfigError(
            "storage.root",
            f"runner.workdir ships the code through the run dir, which the pods must read; "
            f"allowed with backend={cfg.backend.name}: s3://bucket/prefix",
        )
    if runner.workdir_max_mb < 1:
        raise JobConfigError("runner.workdir_max_mb", f"must be >= 1, got {runner.workdir_max_mb}")


def check_runner(cfg: Any) -> None:
    runner = cfg.runner
    if runner.name not in RUNNERS:
        raise JobConfigError(
            "runner.name", f"unknown runner {runner.name!r}; allowed: {', '.join(RUNNERS)}"
        )
    check_foreign_keys(runner)
    if runner.code is not None and runner.workdir is None:
        raise JobConfigError(
            "runner.code", "is set by the launcher from runner.workdir; allowed: null"
        )
    if runner.name in (COMMAND, HF):
        check_env(runner)
    if runner.name == COMMAND:
        check_command(cfg)
        if cfg.model.init_from is not None:  # its config carries no model section
            raise JobConfigError(
                "model.init_from",
                "runner=command does not read it (your command loads its own model); "
                "allowed: null, or runner=trainstack|hf",
            )
    if runner.name == HF and cfg.model.init_from is None:
        raise JobConfigError(
            "model.init_from",
            "runner=hf fine-tunes a Hugging Face checkpoint; allowed: its directory or "
            "s3://bucket/prefix, e.g. model=hf model.init_from=s3://bucket/models/x",
        )
