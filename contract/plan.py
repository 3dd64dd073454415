"""What the trainer and the launcher's plan both derive from a config, the same way."""

from __future__ import annotations

from contract.config import TrainerJobConfig


def model_label(cfg: TrainerJobConfig) -> str:
    """What the plan calls the model: the preset name, else the checkpoint's directory."""
    if cfg.model.name is not None:
        return cfg.model.name
    return (cfg.model.init_from or "").rstrip("/").rsplit("/", 1)[-1]


def tokenizer_source(cfg: TrainerJobConfig) -> str:
    """`data.tokenizer`, defaulting to the init_from checkpoint's tokenizer (else `byte`)."""
    if cfg.data.tokenizer is not None:
        return cfg.data.tokenizer
    return cfg.model.init_from or "byte"
