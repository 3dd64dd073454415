"""The trainer's logits on `fixed_batch()`, on however many ranks torchrun gives:
`torchrun --nproc_per_node=N tests/hf/logits_worker.py OUT init SOURCE` (weights via
model.init_from's loader), `... OUT checkpoint SOURCE RUN_DIR STEP` (a run's DCP checkpoint,
architecture from SOURCE's config.json) or `... OUT lora SOURCE RUN_DIR STEP` (SOURCE's weights
with a LoRA run's adapters, its settings from RUN_DIR/config.yaml). Rank 0 saves the logits to
OUT."""

from __future__ import annotations

import sys

import torch
from omegaconf import OmegaConf
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)

from contract.checkpoints import step_dir
from contract.model.hf_config import model_args_from_hf
from testing_support.hf_models import fixed_batch
from trainer.distributed import init_distributed, shutdown
from trainer.hf.config import read_hf_config
from trainer.hf.load import load_init_from
from trainer.model.lora import add_lora
from trainer.model.model import Transformer
from trainer.parallelize import parallelize
from trainer.train_state import trained_only


def main(out: str, mode: str, source: str, *rest: str) -> None:
    import torch.distributed.checkpoint as dcp

    args = model_args_from_hf(read_hf_config(source), source)
    env = init_distributed()
    with torch.device("meta"):
        model = Transformer(args)
    if mode == "lora":
        lora = OmegaConf.load(f"{rest[0]}/config.yaml").model.lora
        add_lora(model, lora.rank, lora.alpha, lora.dropout, list(lora.targets))
    # selective AC: wrapper prefixes in the parameter names, as in a real run
    parallelize(
        model, env.mesh, mixed_precision="fp32", activation_checkpoint="selective",
        compile_blocks=False,
    )  # fmt: skip
    model.to_empty(device=env.device)
    if mode == "init":
        load_init_from(model, source, args, env)
    elif mode == "lora":
        run_dir, step = rest
        load_init_from(model, source, args, env)
        model.init_weights(0, adapters_only=True)
        options = StateDictOptions(ignore_frozen_params=True, strict=False)
        state = {"model": trained_only(model, get_model_state_dict(model, options=options))}
        dcp.load(state, checkpoint_id=f"{run_dir}/{step_dir(int(step))}")
        set_model_state_dict(model, state["model"], options=options)
    else:
        run_dir, step = rest
        model.init_weights(0)
        state = {"model": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=f"{run_dir}/{step_dir(int(step))}")
        set_model_state_dict(model, state["model"])
    model.init_rope()
    model.eval()
    with torch.no_grad():
        logits = model(fixed_batch(args.vocab_size))
    if env.is_main:
        torch.save(logits, out)
    shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
