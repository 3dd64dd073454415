"""What a checkpoint holds, and putting it back: model and optimizer (sharded, via the
torch.distributed.checkpoint.state_dict APIs), LR schedule, step, data position, RNG states."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.optim.lr_scheduler import LRScheduler

from trainer.checkpoint import Checkpointer


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


def checkpoint_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: LRScheduler,
    progress: Progress,
    *,
    rank: int,
    device: torch.device,
) -> dict[str, Any]:
    model_sd, optim_sd = get_state_dict(model, optimizer)
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
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
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
    state = {"model": get_model_state_dict(model)}
    checkpointer.load(step, state)
    set_model_state_dict(model, state["model"])
