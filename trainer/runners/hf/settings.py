"""The built-in trainer's keys -> `transformers.TrainingArguments`, where they mean the same
thing. Pure (no transformers import), so it is checked without a GPU or the extra."""

from __future__ import annotations

from typing import Any

from contract.config import RunConfig
from contract.plan import grad_accum_steps
from trainer.errors import ConfigError


def check_supported(cfg: RunConfig) -> None:
    """Keys whose meaning transformers.Trainer cannot give: refused, not ignored."""
    if cfg.data.mixture:
        raise ConfigError("data.mixture: runner=hf reads one source; allowed: data.path")
    if cfg.model.init_from is None:
        raise ConfigError("model.init_from: runner=hf fine-tunes a Hugging Face checkpoint")


def training_arguments(
    cfg: RunConfig, *, output_dir: str, world: int, cuda: bool
) -> dict[str, Any]:
    """Keyword arguments of TrainingArguments for this job on `world` ranks."""
    trainer = cfg.trainer
    precision = trainer.mixed_precision
    bf16 = precision == "bf16" or (precision == "auto" and cuda)
    interval = trainer.checkpoint.interval
    args: dict[str, Any] = {
        "output_dir": output_dir,
        "seed": cfg.seed,
        "data_seed": cfg.seed,
        "max_steps": trainer.max_steps,
        "learning_rate": trainer.lr,
        "warmup_steps": trainer.warmup_steps,
        "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": trainer.min_lr_ratio},
        "weight_decay": trainer.weight_decay,
        "adam_beta1": trainer.beta1,
        "adam_beta2": trainer.beta2,
        "max_grad_norm": trainer.grad_clip,
        "per_device_train_batch_size": trainer.micro_batch_size,
        "per_device_eval_batch_size": trainer.micro_batch_size,
        "gradient_accumulation_steps": grad_accum_steps(cfg, world),
        "logging_steps": trainer.log_interval,
        "save_strategy": "steps" if interval > 0 else "no",
        "save_steps": interval if interval > 0 else 500,
        "save_total_limit": trainer.checkpoint.keep,
        "eval_strategy": "steps" if trainer.eval_interval > 0 else "no",
        "eval_steps": trainer.eval_interval if trainer.eval_interval > 0 else None,
        "bf16": bf16,
        "ddp_find_unused_parameters": False,
        "use_cpu": not cuda,
        "report_to": "none",
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "ddp_timeout": trainer.collective_timeout_s,
    }
    if trainer.activation_checkpoint != "none":  # transformers recomputes whole layers
        args["gradient_checkpointing"] = True
    if cuda and world > 1:
        # FSDP through accelerate (FSDP2), wrapping each decoder layer; full state dicts on
        # save so checkpoints and the export are plain HF files.
        args["fsdp"] = "full_shard auto_wrap"
        args["fsdp_config"] = {
            "version": 2,
            "reshard_after_forward": True,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": "FULL_STATE_DICT",
            "cpu_ram_efficient_loading": True,
        }
    elif not cuda and world > 1:
        args["ddp_backend"] = "gloo"
    return args
