"""How the model is spread over ranks: FSDP2 (or HSDP on a 2-D mesh) per block and at the
root, activation checkpointing, torch.compile."""

from __future__ import annotations

import functools

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from trainer.model.lora import has_adapters, is_adapter
from trainer.model.model import Transformer

aten = torch.ops.aten

# Op-level selective AC keeps these outputs: the matmuls and attention are the expensive
# part of recomputing a block, while the norms, SwiGLU and RoPE around them are cheap to
# redo and hold as many activation bytes. (torchtitan's "op" SAC makes the same trade.)
SAVED_OPS = frozenset(
    getattr(aten, name).default
    for name in (
        "mm",
        "addmm",
        "bmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
)


def mixed_precision_policy(choice: str, device_type: str) -> MixedPrecisionPolicy:
    """auto: bf16 parameters with fp32 gradient reduction on CUDA, plain fp32 elsewhere."""
    if choice == "bf16" or (choice == "auto" and device_type == "cuda"):
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def checkpointed_blocks(choice: str, n_layers: int) -> set[int]:
    """Blocks whose activations are (partly) recomputed in backward. selective: every other
    block — half the saving of full AC for half its recompute cost, a middle ground when full
    AC's extra forward is too slow but no AC runs out of memory. selective_op: every block,
    recomputing only the cheap ops."""
    if choice in ("full", "selective_op"):
        return set(range(n_layers))
    if choice == "selective":
        return set(range(0, n_layers, 2))
    return set()


def _save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def checkpoint_block(block: torch.nn.Module, choice: str) -> torch.nn.Module:
    """`block` wrapped to recompute its activations in backward: all of them, or (selective_op)
    all but the outputs of SAVED_OPS."""
    if choice == "selective_op":
        context = functools.partial(create_selective_checkpoint_contexts, _save_matmuls)
        return checkpoint_wrapper(block, context_fn=context, preserve_rng_state=False)
    return checkpoint_wrapper(block)


def parallelize(
    model: Transformer,
    mesh: DeviceMesh,
    *,
    mixed_precision: str,
    activation_checkpoint: str,
    compile_blocks: bool,
) -> Transformer:
    """Shard `model` (still on meta) in place; the caller materializes it afterwards. A 2-D
    mesh (replicate, shard) gives HSDP: fully_shard shards over its second dimension and
    all-reduces gradients over its first."""
    policy = mixed_precision_policy(mixed_precision, mesh.device_type)
    recomputed = checkpointed_blocks(activation_checkpoint, len(model.layers))
    last = len(model.layers) - 1
    if mesh.device_type == "cuda" and has_adapters(model):
        # A frozen base keeps no optimizer state and no gradients: bf16 halves what it holds.
        for name, param in model.named_parameters():
            if not is_adapter(name):
                param.data = param.data.to(torch.bfloat16)
    for index, block in enumerate(model.layers):
        adapters = [m for name, m in block.named_modules() if name.endswith(("lora_a", "lora_b"))]
        if adapters:
            # Their own FSDP unit: they stay fp32 beside a bf16 base (a unit has one dtype).
            fully_shard(adapters, mesh=mesh, mp_policy=policy)
        if index in recomputed:
            block = checkpoint_block(block, activation_checkpoint)
        if compile_blocks:
            block.compile()
        # The last block's parameters are needed again right away by backward: keep them.
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=index < last)
        model.layers[index] = block
    # The root unit holds the embeddings, final norm and output projection.
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model
