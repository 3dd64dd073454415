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


def check_runner(cfg: Any) -> dict[str, Any] | None:
    """runner=hf: returns its checkpoint's config.json where launch read it (a local
    model.init_from; the plan counts LoRA's parameters from it), else None."""
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
    if runner.name == HF:
        return check_hf_tokenizer(cfg)
    return None


def check_hf_tokenizer(cfg: Any) -> dict[str, Any] | None:
    """runner=hf's tokenizer (data.tokenizer, else init_from's own files), where it is on this
    machine: loaded here against the checkpoint's vocabulary, as the built-in trainer's is, so
    a missing or too-big one is found at launch, not after the ranks start. Remote ones (s3://,
    hf://) are the pods' to read. Returns the local checkpoint's config.json (read once), or
    None where init_from is not a directory here."""
    from pathlib import Path

    from trainer.errors import ConfigError
    from trainer.hf.config import read_hf_config
    from trainer.tokenizer import build_tokenizer

    init_from = cfg.model.init_from
    source = cfg.data.tokenizer if cfg.data.tokenizer is not None else init_from
    if init_from is None or "://" in init_from or not Path(init_from).is_dir():
        return None  # remote, or missing: check_pod_paths / check_local_files name that
    try:
        config = read_hf_config(init_from)
        if "://" not in source and Path(source).is_dir():
            build_tokenizer(source, int(config["vocab_size"]), cfg.data.eos_token)
    except ConfigError as err:
        key, _, problem = str(err).partition(": ")
        if cfg.data.tokenizer is None:
            problem += " (data.tokenizer=null: runner=hf reads model.init_from's own files)"
        raise JobConfigError(key, problem) from None
    except (KeyError, ValueError, TypeError):
        pass  # a config.json without a vocabulary: the model's own checks say so
    return config
