"""Build, shard and initialize the model on however many ranks torchrun gives, then save the
gathered full weights: `torchrun --nproc_per_node=N tests/trainer/init_worker.py OUT SEED`."""

from __future__ import annotations

import sys

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer.distributed import init_distributed, shutdown
from trainer.model.model import Transformer
from trainer.parallelize import parallelize

# Odd sizes on purpose: 2 ranks get uneven shards (FSDP2 pads them).
ARGS = dict(dim=48, n_layers=3, n_heads=4, n_kv_heads=2, vocab_size=257, ffn_hidden_dim=97)


def main(out: str, seed: int) -> None:
    from dataclasses import replace

    from contract.model.args import MODEL_PRESETS

    env = init_distributed()
    with torch.device("meta"):
        model = Transformer(replace(MODEL_PRESETS["tiny"], **ARGS))
    parallelize(
        model,
        env.mesh,
        mixed_precision="auto",
        activation_checkpoint="selective",
        compile_blocks=False,
    )
    model.to_empty(device=env.device)
    model.init_weights(seed)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    if env.is_main:
        torch.save(full, out)
    shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
