"""runner=trainstack: the built-in FSDP2 trainer (`trainer/`) under torchrun; model.*, data.*
and trainer.* configure it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.runners.base import Runner, RunnerOptions
from jobs.runners.program import CodeArchive, PodProgram, launcher


@dataclass
class TrainstackOptions(RunnerOptions):
    name: str = "trainstack"
    code: str | None = None


class Trainstack(Runner):
    options = TrainstackOptions
    builtin = True
    uses_trainer_plan = True

    def describe(self, cfg: Any) -> str:
        return "trainstack (built-in trainer)"

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
        torchrun = launcher(shutdown_timeout_s, max_restarts)
        return PodProgram(torchrun, ("-m", "trainer", "--config", config_path), {})


RUNNER = Trainstack()
