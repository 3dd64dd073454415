"""What every runner is: its options (the `runner` section, one dataclass per runner,
registered with Hydra's ConfigStore so a key of another runner fails at compose time), its
checks, its plan line and the pod program it contributes (`jobs.runners.program`).

A runner answers questions instead of being compared by name (SkyPilot's clouds declare
what they do, the optimizer asks): `builtin`, `reads_model`, `uses_trainer_plan`,
`mirrors_checkpoints`, `image_variant`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from contract.plan import model_label
from jobs.errors import JobConfigError
from jobs.runners.program import (
    FRESH_STORE_ENV,
    CodeArchive,
    PodProgram,
    contract_env,
    exec_wrapper,
    launcher,
)

SCHEMA_PREFIX = "trainstack_runner_"
"""ConfigStore name of a runner's options (`conf/runner/<name>.yaml` starts from it)."""

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED_ENV_PREFIXES = ("TRAINSTACK_", "PET_")
"""Set by trainstack and the operator: the contract and the rendezvous."""
RESERVED_ENV = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED"}
    | set(FRESH_STORE_ENV)
)


@dataclass
class RunnerOptions:
    """The `runner` section: the group's option (`runner=<name>`) picks the subclass, whose
    fields are the only keys that runner reads. Each ends with, or holds, `code`: set by the
    launcher, never by hand (sha256 of the packed runner.workdir, the run record)."""

    name: str = MISSING
    """The runner (the group's option sets it)."""

    @classmethod
    def fields(cls) -> frozenset[str]:
        """Every key of the section, `code` included."""
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def keys(cls) -> list[str]:
        """The keys a user may set (`code` is the launcher's)."""
        return sorted(f.name for f in dataclasses.fields(cls) if f.name != "code")

    @classmethod
    def unknown_key(cls) -> str:
        """The problem of a key this runner does not read (jobs.errors.one_line asks it)."""
        return f"is not a key of runner={cls.name}; allowed: {', '.join(cls.keys())}"


def plain(value: Any) -> Any:
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def check_env(options: Any) -> None:
    """runner.env: names a process may be given, none of the job contract's."""
    for name in options.env:
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


class Runner:
    """One `runner=<name>` choice. Subclasses set `options` and override what differs; the
    defaults describe a runner whose own program is started by `trainer.runner_exec`."""

    options: ClassVar[type[RunnerOptions]]
    builtin: ClassVar[bool] = False
    """The built-in trainer is the program itself: no runner_exec, no scratch volume in the
    pod, no runner label, and it alone reads trainer.resume_from."""
    reads_model: ClassVar[bool] = True
    """model.* and data.* are its inputs (checked, written to its config, shown in the plan)."""
    uses_trainer_plan: ClassVar[bool] = False
    """Validation sizes the job with the built-in trainer's own figures (jobs.validate)."""
    mirrors_checkpoints: ClassVar[bool] = False
    """Its program knows local files only: on an s3:// run dir runner_exec mirrors them."""
    image_variant: ClassVar[str] = ""
    """Prefix of the image tag it needs (`<repository>:<variant><git sha>`)."""

    @property
    def name(self) -> str:
        return self.options.name

    @property
    def schema_name(self) -> str:
        return f"{SCHEMA_PREFIX}{self.name}"

    def check(self, cfg: Any) -> dict[str, Any] | None:
        """Its own checks (JobConfigError); returns what validation read for the plan."""
        return None

    def describe(self, cfg: Any) -> str:
        """The plan's line: which runner and what it runs."""
        raise NotImplementedError

    def job_label(self, cfg: Any) -> str:
        """What the run is named and labelled after: the model, or the runner's name where
        the model is not trainstack's to know (`command`)."""
        return model_label(cfg) if self.reads_model else self.name

    def record(self, options: Any) -> dict[str, Any] | None:
        """Its `runner` section of the `--config` file (the run record): its own keys."""
        if self.builtin:
            return None
        values = plain(options)
        return {f.name: values[f.name] for f in dataclasses.fields(self.options)}

    def wrapped(
        self, options: Any, torchrun: tuple[str, ...], config_path: str
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(launcher, program) runner_exec starts after `--`; a program under torchrun (a
        launcher given) gets a fresh rendezvous store per round."""
        raise NotImplementedError

    def program(
        self,
        options: Any,
        *,
        run_dir: str,
        shutdown_timeout_s: int,
        max_restarts: int,
        config_path: str,
        code: CodeArchive | None = None,
    ) -> PodProgram:
        """The (command, args, env) of its `options` for a job writing to `run_dir`. Pure."""
        torchrun = launcher(shutdown_timeout_s, max_restarts)
        env = contract_env(run_dir, mirrored_checkpoints=self.mirrors_checkpoints)
        env.update(plain(options.get("env")) or {})
        command, args = self.wrapped(options, torchrun, config_path)
        if command:
            env.update(FRESH_STORE_ENV)
        return PodProgram((*exec_wrapper(config_path, code), *command), args, env)
