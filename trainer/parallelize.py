"""How the model is spread over ranks: FSDP2 per block and at the root, AC, torch.compile."""

from __future__ import annotations

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer.model.model import Transformer


def mixed_precision_policy(choice: str, device_type: str) -> MixedPrecisionPolicy:
    """auto: bf16 parameters with fp32 gradient reduction on CUDA, plain fp32 elsewhere."""
    if choice == "bf16" or (choice == "auto" and device_type == "cuda"):
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def checkpointed_blocks(choice: str, n_layers: int) -> set[int]:
    """Blocks whose activations are recomputed in backward. selective: every other block —
    half the saving of full AC for half its recompute cost, a middle ground when full AC's
    extra forward is too slow but no AC runs out of memory."""
    if choice == "full":
        return set(range(n_layers))
    if choice == "selective":
        return set(range(0, n_layers, 2))
    return set()


def parallelize(
    model: Transformer,
    mesh: DeviceMesh,
    *,
    mixed_precision: str,
    activation_checkpoint: str,
    compile_blocks: bool,
) -> Transformer:
    """Shard `model` (still on meta) in place; the caller materializes it afterwards."""
    policy = mixed_precision_policy(mixed_precision, mesh.device_type)
    recomputed = checkpointed_blocks(activation_checkpoint, len(model.layers))
    last = len(model.layers) - 1
    for index, block in enumerate(model.layers):
        if index in recomputed:
            block = checkpoint_wrapper(block)
        if compile_blocks:
            block.compile()
        # The last block's parameters are needed again right away by backward: keep them.
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=index < last)
        model.layers[index] = block
    # The root unit holds the embeddings, final norm and output projection.
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model
