"""The trainer config's checks that need no I/O: closed choices, ranges, the profile window,
resume, data sources, LoRA and the model's shape. Each raises one `ConfigError` line naming the
key and what is allowed; `contract.plan.make_plan` runs them all, so the launcher finds a bad
value at launch rather than on the nodes.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from contract.config import CHOICES, RunConfig
from contract.errors import ConfigError
from contract.model.args import ModelArgs, family_problem
from contract.model.families import PROJECTIONS


def _value(cfg: RunConfig, key: str) -> Any:
    # A plain attribute walk: `cfg` is already typed, and wrapping it in OmegaConf again would
    # cost ~10 ms per call — on every world size of every sweep point `jobs` validates.
    return functools.reduce(getattr, key.split("."), cfg)


def check_choices(cfg: RunConfig) -> None:
    for key, allowed in CHOICES.items():
        value = _value(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(allowed)}")


MAX_STEP_COUNT = 10**9
"""The ceiling of step counts and intervals: a billion steps is centuries of training at any
step time, and past int64 the plan's float arithmetic (hours, cost) overflows."""
_STEPS = f"<= {MAX_STEP_COUNT}"

# key -> (lowest allowed, highest allowed or None, how to say it)
_RANGES: dict[str, tuple[float, float | None, str]] = {
    "trainer.max_steps": (1, MAX_STEP_COUNT, f"an integer >= 1 and {_STEPS}"),
    "trainer.micro_batch_size": (1, None, "an integer >= 1"),
    "trainer.grad_accum_steps": (1, None, "an integer >= 1"),
    "trainer.global_batch_size": (1, None, "null or an integer >= 1"),
    "trainer.log_interval": (1, MAX_STEP_COUNT, f"an integer >= 1 and {_STEPS}"),
    "trainer.eval_interval": (0, MAX_STEP_COUNT, f"0 (off) or an integer >= 1 and {_STEPS}"),
    "trainer.eval_batches": (1, MAX_STEP_COUNT, f"an integer >= 1 and {_STEPS}"),
    "trainer.warmup_steps": (0, MAX_STEP_COUNT, f"an integer >= 0 and {_STEPS}"),
    "trainer.lr": (1e-12, None, "a finite number > 0"),
    "trainer.min_lr_ratio": (0, 1, "a number in [0, 1]"),
    "trainer.grad_clip": (0, None, "0 (off) or a finite number > 0"),
    "trainer.peak_tflops": (1e-6, None, "null or a positive TFLOP/s figure, e.g. 989.4"),
    "trainer.collective_timeout_s": (10, None, "an integer >= 10 (seconds)"),
    "trainer.checkpoint.interval": (
        0,
        MAX_STEP_COUNT,
        f"0 (only at the end) or an integer >= 1 and {_STEPS}",
    ),
    "trainer.checkpoint.keep": (1, None, "an integer >= 1"),
    "trainer.checkpoint.max_consecutive_failures": (1, None, "an integer >= 1"),
    "data.seq_len": (1, None, "an integer >= 1"),
    "data.eval_fraction": (0, 0.5, "a fraction in [0, 0.5]"),
    "data.max_bad_fraction": (0, 1, "a fraction in [0, 1]"),
}
MAX_INT = 2**63 - 1
"""Past int64 every range is refused: no count the trainer or the plan does goes that far."""


def in_range(value: float, low: float, high: float | None) -> bool:
    """`low <= value <= high` for a finite number (NaN compares false both ways, so `value <
    low` alone let it through; a huge int would overflow math.isfinite)."""
    if isinstance(value, int) and not isinstance(value, bool):
        finite = abs(value) <= MAX_INT
    else:
        finite = math.isfinite(value)
    return finite and low <= value and (high is None or value <= high)


def check_ranges(cfg: RunConfig) -> None:
    for key, (low, high, allowed) in _RANGES.items():
        value = _value(cfg, key)
        if value is not None and not in_range(value, low, high):
            raise ConfigError(f"{key}: {value!r} is out of range; allowed: {allowed}")


def check_profile(cfg: RunConfig) -> None:
    steps, max_steps = list(cfg.trainer.profile.steps), cfg.trainer.max_steps
    if steps and not (len(steps) == 2 and 1 <= steps[0] <= steps[1] <= max_steps):
        raise ConfigError(
            f"trainer.profile.steps: {steps} is not allowed; allowed: [] (off) or "
            f"[first, last] with 1 <= first <= last <= trainer.max_steps ({max_steps})"
        )


def check_resume(cfg: RunConfig) -> None:
    t = cfg.trainer
    if t.resume_from is not None and not t.resume_from.strip():
        raise ConfigError(
            "trainer.resume_from: is empty; allowed: null, or a run dir or checkpoint path"
        )
    if t.resume_weights_only and t.resume_from is None:
        raise ConfigError(
            "trainer.resume_weights_only: needs trainer.resume_from (the checkpoint whose "
            "weights to start from); allowed without it: false"
        )


def check_data_sources(data: Any) -> None:
    """Exactly one of data.path and data.mixture; every mixture entry a path and a weight > 0."""
    mixture = list(data.mixture)
    if data.path is not None and mixture:
        raise ConfigError(
            "data.mixture: given together with data.path; allowed: one of them "
            "(set data.path=null to train on the mixture)"
        )
    if data.path is None and not mixture:
        raise ConfigError(
            "data.mixture: empty and data.path is null; allowed: a data.path, or a list of "
            "{path: <prepared dataset>, weight: <number > 0>}"
        )
    for index, source in enumerate(mixture):
        if not source.path:
            raise ConfigError(f"data.mixture[{index}].path: empty; allowed: a prepared dataset")
        if not (math.isfinite(source.weight) and source.weight > 0):
            raise ConfigError(
                f"data.mixture[{index}].weight: {source.weight!r} is not allowed; "
                "allowed: a finite number > 0"
            )


def check_lora(cfg: RunConfig) -> None:
    lora = cfg.model.lora
    if lora.rank < 0:
        raise ConfigError(f"model.lora.rank: {lora.rank} is out of range; allowed: 0 (off) or >= 1")
    if not lora.rank:
        return
    if cfg.model.init_from is None:
        raise ConfigError(
            "model.lora.rank: LoRA adapts a pretrained model; allowed: 0 without "
            "model.init_from, >= 1 with it"
        )
    if not lora.alpha > 0:
        raise ConfigError(f"model.lora.alpha: {lora.alpha!r} is out of range; allowed: > 0")
    if not 0 <= lora.dropout < 1:
        raise ConfigError(f"model.lora.dropout: {lora.dropout!r} is out of range; allowed: [0, 1)")
    known = PROJECTIONS
    bad = [t for t in lora.targets if t not in known]
    if bad or not lora.targets:
        raise ConfigError(
            f"model.lora.targets: {bad or list(lora.targets)} is not allowed; allowed: a "
            f"non-empty list of {', '.join(known)}"
        )


def check_model(args: ModelArgs) -> None:
    problem = family_problem(args)
    if problem:
        raise ConfigError(problem)
    floored = args.dim % args.n_heads and args.head_dim == args.dim // args.n_heads
    if args.head_dim % 2 or floored:  # type: ignore[operator]
        raise ConfigError(
            f"model.dim: {args.dim} must be a multiple of model.n_heads ({args.n_heads}) "
            "with an even head dimension (RoPE rotates pairs), or model.head_dim set even"
        )
    if args.n_heads % args.n_kv_heads:
        raise ConfigError(
            f"model.n_kv_heads: {args.n_kv_heads} must divide model.n_heads ({args.n_heads})"
        )
