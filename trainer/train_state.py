"""What a checkpoint holds, and putting it back: model and optimizer (sharded, via the
torch.distributed.checkpoint.state_dict APIs), LR schedule, step, data position, RNG states."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.optim.lr_scheduler import LRScheduler

from trainer.checkpoint import Checkpointer
from trainer.model.model import plain_name


@dataclass
class Progress:
    step: int = 0
    """Optimizer steps completed."""
    samples_seen: int = 0
    """Global sample index of the next step's first sequence: the whole data position."""


def _rng_key(rank: int) -> str:
    # One entry per rank: DCP would keep a single copy of an entry every rank saves alike.
    return f"rank{rank}"


def _rng_states(device: torch.device) -> dict[str, torch.Tensor]:
    states = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def _options(model: nn.Module) -> StateDictOptions | None:
    """A model with frozen parameters (LoRA's base) saves and loads only the trained ones:
    the base comes from model.init_from on every start."""
    if all(p.requires_grad for p in model.parameters()):
        return None
    return StateDictOptions(ignore_frozen_params=True, strict=False)


def trained_only(model: nn.Module, model_sd: dict[str, Any]) -> dict[str, Any]:
    """`model_sd` without frozen entries: ignore_frozen_params keeps the tied alias of a
    frozen table (output.weight), which would put the whole embedding in every checkpoint."""
    trained = {plain_name(n) for n, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in model_sd.items() if k in trained}


def checkpoint_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: LRScheduler,
    progress: Progress,
    *,
    rank: int,
    device: torch.device,
) -> dict[str, Any]:
    options = _options(model)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    if options is not None:
        model_sd = trained_only(model, model_sd)
    train = {"progress": asdict(progress), "scheduler": scheduler.state_dict()}
    return {
        "model": model_sd,
        "optim": optim_sd,
        "train": json.dumps(train),
        "rng": {_rng_key(rank): _rng_states(device)},
    }


def restore(
    checkpointer: Checkpointer,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: LRScheduler,
    *,
    rank: int,
    device: torch.device,
) -> tuple[Progress, bool]:
    """Load checkpoint `step` into the live objects: (progress, whether RNG states were
    restored — not when this rank did not exist in the run that saved it)."""
    state = checkpoint_state(model, optimizer, scheduler, Progress(), rank=rank, device=device)
    saved = checkpointer.saved_keys(step)
    rng_saved = any(k.startswith(f"rng.{_rng_key(rank)}.") for k in saved)
    if not rng_saved:
        del state["rng"]
    checkpointer.load(step, state)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=_options(model),
    )
    train = json.loads(state["train"])
    scheduler.load_state_dict(train["scheduler"])
    if rng_saved:
        rng = state["rng"][_rng_key(rank)]
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng:
            torch.cuda.set_rng_state(rng["cuda"], device)
    return Progress(**train["progress"]), rng_saved


def restore_weights(checkpointer: Checkpointer, step: int, model: nn.Module) -> None:
    """Load only the model weights of checkpoint `step` (`trainer.resume_weights_only`): DCP
    reads just the `model.*` entries; optimizer, schedule, progress and RNG stay as built."""
    options = _options(model)
    model_sd = get_model_state_dict(model, options=options)
    if options is not None:  # LoRA: the adapters; the frozen base is init_from's
        model_sd = trained_only(model, model_sd)
    state = {"model": model_sd}
    checkpointer.load(step, state)
    set_model_state_dict(model, state["model"], options=options)
