"""`trainstack eval RUN eval.<key>=<value> ...`: the evaluation's settings, one dataclass.

torch-free: the CLI checks them before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trainer.errors import ConfigError

PREFIX = "eval."


@dataclass
class EvalConfig:
    tasks: list[str] = field(default_factory=list)
    """lm-eval task (or group) names: its own, or those in `include_path`'s YAMLs."""
    include_path: str | None = None
    """A directory of task YAMLs (lm-eval's `--include_path`). Offline: a local task reads
    `dataset_path: json` with absolute `dataset_kwargs.data_files`."""
    include_defaults: bool = True
    """Index lm-eval's ~15k built-in tasks too (about 30 s); false: `include_path`'s alone."""
    limit: float | None = None
    """Documents per task for a quick look: a count (>= 1) or a fraction (< 1); null: all."""
    num_fewshot: int | None = None
    """Few-shot examples per prompt (null: each task's own default)."""
    batch_size: int = 1
    """Requests per forward pass (direct) or per HTTP request (--endpoint)."""
    max_gen_tokens: int | None = None
    """Most tokens a generation task's answer may have (null: each task's own
    `generation_kwargs.max_gen_toks`, else lm-eval's 256)."""


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(`eval.*` overrides, the others: where runs are, e.g. `stack=prod`)."""
    ours = [o for o in overrides if o.startswith(PREFIX)]
    return ours, [o for o in overrides if not o.startswith(PREFIX)]


def parse_eval_config(overrides: list[str]) -> EvalConfig:
    """The `eval.*` overrides as an EvalConfig, or one ConfigError naming the key."""
    schema = OmegaConf.structured(EvalConfig)
    for item in overrides:
        key, sep, _ = item.partition("=")
        name = key[len(PREFIX) :]
        if not sep:
            raise ConfigError(f"{item}: not key=value; allowed: eval.<key>=<value>")
        if name not in schema:
            allowed = ", ".join(PREFIX + k for k in schema)
            raise ConfigError(f"{key}: no such key; allowed: {allowed}")
    try:
        dotlist = OmegaConf.from_dotlist([o[len(PREFIX) :] for o in overrides])
        cfg: EvalConfig = OmegaConf.to_object(OmegaConf.merge(schema, dotlist))  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        key = PREFIX + str(getattr(exc, "full_key", "") or "")
        raise ConfigError(f"{key}: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    check_eval_config(cfg)
    return cfg


def check_eval_config(cfg: EvalConfig) -> None:
    if not cfg.tasks or not all(isinstance(t, str) and t.strip() for t in cfg.tasks):
        raise ConfigError(
            "eval.tasks: name at least one task, e.g. eval.tasks=[my_task]; allowed: lm-eval "
            "task names or those in eval.include_path"
        )
    if cfg.include_path is not None and not Path(cfg.include_path).is_dir():
        raise ConfigError(f"eval.include_path: {cfg.include_path!r} is not a directory")
    if not cfg.include_defaults and cfg.include_path is None:
        raise ConfigError("eval.include_defaults: false needs eval.include_path (no task left)")
    fraction, count = 0 < (cfg.limit or 0) < 1, (cfg.limit or 0) >= 1
    if cfg.limit is not None and not (fraction or (count and float(cfg.limit).is_integer())):
        raise ConfigError(
            f"eval.limit: {cfg.limit} is not allowed; allowed: a count >= 1 or a fraction in (0, 1)"
        )
    for key, value, low in (
        ("batch_size", cfg.batch_size, 1),
        ("max_gen_tokens", cfg.max_gen_tokens, 1),
        ("num_fewshot", cfg.num_fewshot, 0),
    ):
        if value is not None and value < low:
            raise ConfigError(f"eval.{key}: {value} is out of range; allowed: >= {low}")
