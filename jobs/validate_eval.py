"""`eval.*` on `trainstack launch`: `eval.every_checkpoint=true` scores each committed
checkpoint once the run has trained, with `trainstack eval`'s keys (trainer/evaluation/).

Checked before anything is written or started, one line naming the key: where it is built
(backend=local; backend=kubernetes with `--wait`, whose follower submits an eval Job per
checkpoint: jobs/backends/kubernetes/eval_schedule.py; not backend=render, which runs
nothing), which runs it can read (the built-in trainer's checkpoints), the keys' values as
`trainstack eval` checks them, `eval.max_concurrent` (the cluster's alone), lm-eval being
installed here (backend=local), and, for a task directory alone
(`eval.include_defaults=false`), the task names. With lm-eval's ~15k own tasks indexed too
(about 30 s), the names are checked when the evaluation starts (on the cluster: the eval
pod, whose Job then fails at once, exit 2).
"""

from __future__ import annotations

import importlib.util
from dataclasses import fields
from typing import Any

from omegaconf import OmegaConf

from jobs.backend_registry import traits_of
from jobs.errors import JobConfigError
from jobs.runners import runner_for
from jobs.validate_common import in_pods
from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig, check_eval_config

EVERY_CHECKPOINT = "eval.every_checkpoint"
EVAL_EXTRA = "pip install -c constraints.txt -e '.[eval]'"
MAX_CONCURRENT = "eval.max_concurrent"
MAX_CONCURRENT_LIMIT = 16
"""Eval Jobs of one run at once, at most: each holds a GPU of the ClusterQueue's quota."""


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
        if values["max_concurrent"] != 1:
            raise JobConfigError(
                MAX_CONCURRENT, f"is read only with {EVERY_CHECKPOINT}=true; allowed: 1"
            )
        return
    if in_pods(cfg):
        _check_on_cluster(cfg)
    elif section.max_concurrent != 1:
        raise JobConfigError(
            MAX_CONCURRENT,
            f"{section.max_concurrent}: backend={cfg.backend.name} scores its checkpoints one "
            "after the other once the run has trained; allowed: 1, or backend=kubernetes",
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
    if not in_pods(cfg) and importlib.util.find_spec("lm_eval") is None:
        raise JobConfigError(
            EVERY_CHECKPOINT,
            f"needs lm-evaluation-harness, which is not installed; allowed: the eval extra "
            f"({EVAL_EXTRA}), or {EVERY_CHECKPOINT}=false",
        )


def _check_on_cluster(cfg: Any) -> None:
    """backend=kubernetes: a follower to submit the eval Jobs, a GPU to run them on, a limit,
    and nothing a pod cannot read."""
    name = cfg.backend.name
    if not traits_of(name).submits:
        raise JobConfigError(
            EVERY_CHECKPOINT,
            f"backend={name} runs nothing, so no checkpoint lands to be scored; allowed: "
            f"backend=kubernetes --wait, or `trainstack eval RUN --step N backend={name}` "
            "once the run has checkpoints",
        )
    if not (cfg.backend.wait or cfg.backend.get("evals_scheduled", False)):
        raise JobConfigError(
            EVERY_CHECKPOINT,
            f"on backend={name} the eval jobs are submitted by the launch that follows the "
            "run; allowed: `trainstack launch --wait ...`, or `trainstack eval RUN --step N "
            f"backend={name}` per checkpoint",
        )
    if cfg.compute.instance_type is None:
        raise JobConfigError(
            EVERY_CHECKPOINT,
            f"compute={cfg.compute.name} has no GPU for the eval jobs (one GPU of compute's "
            "instance type each); allowed: compute=<GPU instance type>",
        )
    limit = cfg.eval.max_concurrent
    if isinstance(limit, bool) or not 1 <= limit <= MAX_CONCURRENT_LIMIT:
        raise JobConfigError(
            MAX_CONCURRENT, f"{limit} is out of range; allowed: 1..{MAX_CONCURRENT_LIMIT}"
        )
    if cfg.eval.include_path is not None:
        raise JobConfigError(
            "eval.include_path",
            f"{cfg.eval.include_path!r} is this machine's directory, which the eval pods "
            f"cannot read; allowed: lm-eval's own tasks on backend={name}, or backend=local",
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
