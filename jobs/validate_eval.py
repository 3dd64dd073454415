"""`eval.*` on `trainstack launch`: `eval.every_checkpoint=true` scores each committed
checkpoint once the run has trained, with `trainstack eval`'s keys (trainer/evaluation/).

Checked before anything is written or started, one line naming the key: where it is built
(backend=local), which runs it can read (the built-in trainer's checkpoints), the keys'
values as `trainstack eval` checks them, lm-eval being installed, and, for a task directory
alone (`eval.include_defaults=false`), the task names. With lm-eval's ~15k own tasks indexed
too (about 30 s), the names are checked when the evaluation starts.
"""

from __future__ import annotations

import importlib.util
from dataclasses import fields
from typing import Any

from omegaconf import OmegaConf

from jobs.errors import JobConfigError
from jobs.runners import runner_for
from jobs.validate_common import in_pods
from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig, check_eval_config

EVERY_CHECKPOINT = "eval.every_checkpoint"
EVAL_EXTRA = "pip install -c constraints.txt -e '.[eval]'"


def eval_settings(cfg: Any) -> EvalConfig | None:
    """What each checkpoint is scored with (`trainstack eval`'s keys), or None when the job
    evaluates nothing (`eval.every_checkpoint` false)."""
    section = cfg.get("eval")
    if section is None or not section.every_checkpoint:
        return None
    values = OmegaConf.to_container(section, resolve=True)
    assert isinstance(values, dict)
    return EvalConfig(**{f.name: values[f.name] for f in fields(EvalConfig)})


def _job_error(err: ConfigError) -> JobConfigError:
    key, _, problem = str(err).partition(": ")
    return JobConfigError(key, problem)


def check_eval(cfg: Any) -> None:
    """The cheap checks: where, what it reads, the values (no lm-eval import)."""
    section = cfg.get("eval")
    if section is None:
        return
    if not section.every_checkpoint:
        # A key the job would not read is refused, never ignored.
        defaults, values = EvalConfig(), OmegaConf.to_container(section, resolve=True)
        assert isinstance(values, dict)
        for f in fields(EvalConfig):
            if values[f.name] != getattr(defaults, f.name):
                raise JobConfigError(
                    f"eval.{f.name}",
                    f"is read only with {EVERY_CHECKPOINT}=true; allowed: "
                    f"{EVERY_CHECKPOINT}=true, or `trainstack eval RUN eval.{f.name}=...` "
                    "once the run has a checkpoint",
                )
        return
    if in_pods(cfg):
        raise JobConfigError(
            EVERY_CHECKPOINT,
            f"not built for backend={cfg.backend.name} yet (the cluster's form: an eval job "
            "per checkpoint); allowed: backend=local, or `trainstack eval RUN --step N` "
            "once the run has checkpoints",
        )
    runner = runner_for(cfg)
    if not runner.builtin:
        raise JobConfigError(
            EVERY_CHECKPOINT,
            f"runner={runner.name} writes checkpoints `trainstack eval` does not read; "
            "allowed: runner=trainstack (the built-in trainer's checkpoints)",
        )
    settings = eval_settings(cfg)
    assert settings is not None
    try:
        check_eval_config(settings)
    except ConfigError as err:
        raise _job_error(err) from None
    if importlib.util.find_spec("lm_eval") is None:
        raise JobConfigError(
            EVERY_CHECKPOINT,
            f"needs lm-evaluation-harness, which is not installed; allowed: the eval extra "
            f"({EVAL_EXTRA}), or {EVERY_CHECKPOINT}=false",
        )


def check_eval_tasks(cfg: Any) -> None:
    """The task names, against `eval.include_path`'s YAMLs, when they alone are indexed."""
    settings = eval_settings(cfg)
    if settings is None or settings.include_defaults:
        return
    from trainer.evaluation.tasks import task_manager  # lazy: lm-eval (~3 s), for this alone

    try:
        task_manager(settings)
    except ConfigError as err:
        raise _job_error(err) from None
