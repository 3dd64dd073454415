"""Op-level selective activation checkpointing keeps the matmul outputs (backward recomputes
no matmul, unlike full AC) and gives the same gradients as no AC; AdamW is fused on CUDA and
foreach on CPU."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from contract.config import TrainerConfig
from contract.model.args import MODEL_PRESETS
from trainer.model.model import Transformer, TransformerBlock, rope_tables
from trainer.optim import adamw_implementation, build_optimizer
from trainer.parallelize import checkpoint_block, checkpointed_blocks

ARGS = replace(MODEL_PRESETS["tiny"], dim=32, n_heads=4, n_kv_heads=2, ffn_hidden_dim=64)


class CountMatmuls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _backward_matmuls_and_grads(choice: str) -> tuple[int, list[torch.Tensor]]:
    torch.manual_seed(0)
    block = TransformerBlock(ARGS)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.1)
    block = checkpoint_block(copy.deepcopy(block), choice) if choice != "none" else block
    x = torch.randn(2, 16, ARGS.dim, requires_grad=True)
    cos, sin = (table[:16] for table in rope_tables(ARGS))
    out = block(x, cos, sin, None).square().sum()
    counter = CountMatmuls()
    with counter:
        out.backward()
    return counter.count, [x.grad, *(p.grad for p in block.parameters())]


def test_op_selective_ac_recomputes_no_matmul_and_keeps_the_gradients():
    plain, plain_grads = _backward_matmuls_and_grads("none")
    full, _ = _backward_matmuls_and_grads("full")
    op, op_grads = _backward_matmuls_and_grads("selective_op")
    # Full AC runs the block's forward again (as far as backward needs it: 6 of its 7).
    assert full >= plain + 6
    assert op == plain  # op-level SAC saved every matmul output
    for got, want in zip(op_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want)


def test_op_selective_ac_wraps_every_block():
    assert checkpointed_blocks("selective_op", 4) == {0, 1, 2, 3}
    assert checkpointed_blocks("selective", 4) == {0, 2}


@pytest.mark.parametrize(
    ("device_type", "expected"), [("cuda", {"fused": True}), ("cpu", {"foreach": True})]
)
def test_adamw_is_fused_on_cuda_and_foreach_on_cpu(device_type, expected):
    assert adamw_implementation(device_type) == expected


def test_the_cpu_optimizer_is_built_foreach():
    model = Transformer(replace(ARGS, n_layers=1, vocab_size=17))
    optimizer = build_optimizer(model, TrainerConfig())
    assert optimizer.defaults["foreach"] is True and not optimizer.defaults["fused"]
