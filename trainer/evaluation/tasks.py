"""lm-eval's task index, with every name in `eval.tasks` checked against it.

Apart from the harness (no torch or transformers of ours): `trainstack launch
eval.every_checkpoint=true` checks the task names of a local task directory before the run
starts (lm-eval's import, about 3 s), and `trainstack eval` before any model is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager


def task_manager(cfg: EvalConfig) -> TaskManager:
    """The index of `cfg`'s tasks (`include_path`, and lm-eval's own unless
    `include_defaults=false`: about 30 s); ConfigError naming the first unknown task."""
    from lm_eval.tasks import TaskManager  # lazy: lm-eval, for evaluating alone

    manager = TaskManager(include_path=cfg.include_path, include_defaults=cfg.include_defaults)
    known = set(manager.all_tasks)
    unknown = [t for t in cfg.tasks if t not in known]
    if unknown:
        local = (
            sorted(TaskManager(include_path=cfg.include_path, include_defaults=False).all_tasks)
            if cfg.include_path
            else []
        )
        hint = f"; tasks in eval.include_path: {', '.join(local[:20])}" if local else ""
        raise ConfigError(
            f"eval.tasks: no task named {unknown[0]!r}; allowed: lm-eval's task names "
            f"(`lm_eval ls tasks`) or a task in eval.include_path{hint}"
        )
    return manager
