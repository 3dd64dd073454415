"""What the trainer and the launcher's plan both derive from a config, the same way: the
model's label and tokenizer, the data-parallel mesh, the accumulation steps and the plan the
trainer prints at start-up (`make_plan`, which runs every check of `contract.checks` first).

torch-free on purpose: `jobs/validate_trainer.py` calls `make_plan` for every world size a job
can run at, so a bad value fails at launch rather than on the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.checks import (
    check_choices,
    check_data_sources,
    check_lora,
    check_model,
    check_profile,
    check_ranges,
    check_resume,
)
from contract.config import RunConfig
from contract.errors import ConfigError
from contract.model.args import MODEL_PRESETS, ModelArgs, model_args_from_config
from contract.model.hf_config import resolve_init_from_args


def model_label(cfg: RunConfig) -> str:
    """What the plan calls the model: the preset name, else the checkpoint's directory."""
    if cfg.model.name is not None:
        return cfg.model.name
    return (cfg.model.init_from or "").rstrip("/").rsplit("/", 1)[-1]


def tokenizer_source(cfg: RunConfig) -> str:
    """`data.tokenizer`, defaulting to the init_from checkpoint's tokenizer (else `byte`)."""
    if cfg.data.tokenizer is not None:
        return cfg.data.tokenizer
    return cfg.model.init_from or "byte"


@dataclass(frozen=True)
class Plan:
    """Numbers derived from the config and the world size, printed once at start-up."""

    model: ModelArgs
    dp_size: int
    """Data-parallel ranks in all: dp_replicate x dp_shard (the world size)."""
    micro_batch_size: int
    grad_accum_steps: int
    global_batch_size: int
    seq_len: int
    dp_replicate: int = 1
    dp_shard: int = 1

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_len

    def describe(self) -> str:
        mesh = f" (replicate {self.dp_replicate} x shard {self.dp_shard})"
        return (
            f"model {self.model.num_params() / 1e6:.1f}M params, dp={self.dp_size}"
            f"{mesh if self.dp_replicate > 1 else ''}, "
            f"global batch {self.global_batch_size} = micro {self.micro_batch_size} x accum "
            f"{self.grad_accum_steps} x dp {self.dp_size}, seq_len {self.seq_len}, "
            f"{self.tokens_per_step} tokens/step"
        )


def make_plan(cfg: RunConfig, world_size: int, hf_config: dict[str, Any] | None = None) -> Plan:
    """`hf_config`: the `model.init_from` checkpoint's config.json (it decides the
    architecture); without it a run with init_from is planned from the preset `model.name`
    (the launcher's view of an s3:// checkpoint; the trainer checks the two agree)."""
    check_choices(cfg)
    check_ranges(cfg)
    check_profile(cfg)
    check_resume(cfg)
    check_data_sources(cfg.data)
    args = _model_args(cfg, hf_config)
    check_model(args)
    check_lora(cfg)
    if cfg.data.seq_len > args.max_seq_len:
        raise ConfigError(
            f"data.seq_len: {cfg.data.seq_len} exceeds the model's maximum sequence length "
            f"{args.max_seq_len} (model {model_label(cfg)!r}); allowed: 1..{args.max_seq_len}"
        )
    t = cfg.trainer
    replicate, shard = data_parallel_mesh(cfg, world_size)
    per_pass = t.micro_batch_size * world_size
    accum = grad_accum_steps(cfg, world_size)
    return Plan(
        args,
        world_size,
        t.micro_batch_size,
        accum,
        per_pass * accum,
        cfg.data.seq_len,
        dp_replicate=replicate,
        dp_shard=shard,
    )


def grad_accum_steps(cfg: RunConfig, world_size: int) -> int:
    """Micro batches per step: `trainer.grad_accum_steps`, or what `trainer.global_batch_size`
    makes of micro_batch_size x `world_size` data-parallel ranks (ConfigError if it can't)."""
    t = cfg.trainer
    if t.global_batch_size is None:
        return t.grad_accum_steps
    per_pass = t.micro_batch_size * world_size
    if t.global_batch_size % per_pass:
        raise ConfigError(
            f"trainer.global_batch_size: {t.global_batch_size} is not divisible by "
            f"trainer.micro_batch_size ({t.micro_batch_size}) x data-parallel ranks "
            f"({world_size}) = {per_pass}; allowed: a positive multiple of {per_pass}"
        )
    return t.global_batch_size // per_pass


def data_parallel_mesh(cfg: RunConfig, world_size: int) -> tuple[int, int]:
    """(dp_replicate, dp_shard) at `world_size`; their product must be the world size."""
    p = cfg.trainer.parallel
    replicate = p.dp_replicate
    if replicate < 1 or replicate > world_size or world_size % replicate:
        raise ConfigError(
            f"trainer.parallel.dp_replicate: {replicate} does not divide the world size "
            f"{world_size}; allowed: a divisor of {world_size} (with trainer.parallel.dp_shard)"
        )
    shard = world_size // replicate if p.dp_shard == -1 else p.dp_shard
    if replicate * shard != world_size:
        raise ConfigError(
            f"trainer.parallel.dp_replicate x trainer.parallel.dp_shard: {replicate} x "
            f"{p.dp_shard} = {replicate * p.dp_shard} must equal the world size {world_size}; "
            "allowed: a product equal to it (dp_shard=-1: world size / dp_replicate)"
        )
    return replicate, shard


def _model_args(cfg: RunConfig, hf_config: dict[str, Any] | None) -> ModelArgs:
    model = cfg.model
    if model.init_from is not None and hf_config is not None:
        return resolve_init_from_args(model, hf_config)
    if model.name is None:
        needs = "model.init_from" if model.init_from is None else "a local model.init_from"
        raise ConfigError(
            f"model.name: null needs {needs} (whose config.json gives the architecture); "
            f"allowed: {', '.join(MODEL_PRESETS)}"
        )
    try:
        return model_args_from_config(model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
