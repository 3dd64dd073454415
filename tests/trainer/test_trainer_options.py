"""Activation checkpointing, torch.compile and bf16 on CPU, in real single-process runs of the
small model: AC recomputes the same fp32 arithmetic, so its losses match a plain run bit for
bit; compiled blocks match within a tolerance; bf16 parameters still train."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from torch.distributed.device_mesh import init_device_mesh

from contract.model.args import ModelArgs
from tests.trainer.harness import launch_trainer, losses_by_step
from trainer.model.model import Transformer
from trainer.parallelize import parallelize

pytestmark = [
    pytest.mark.slow,
    # Inductor's own imports (torch.utils.mkldnn) use the deprecated torch.jit.script_method.
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

STEPS = 4
VARIANTS = {
    "plain": [],
    "ac_full": ["trainer.activation_checkpoint=full"],
    "ac_selective": ["trainer.activation_checkpoint=selective"],
    "ac_selective_op": ["trainer.activation_checkpoint=selective_op"],
    "compile": ["trainer.compile=true"],
    "bf16": ["trainer.mixed_precision=bf16"],
}
# Inductor may fuse ops and reorder fp32 reductions (norms, softmax, matmul tiling): ulp-level
# differences in the logits, which Adam's normalized steps keep near that size over a few
# steps. 1e-4 relative is ~1000x fp32 epsilon, yet ~400x smaller than the ~4% the loss falls
# per step here, so a compiled graph that computed something else could not pass.
COMPILE_RTOL = 1e-4


@pytest.fixture(scope="module")
def losses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, float]]:
    """Every variant's loss per step. The runs are independent single processes, so they are
    started together (one intra-op thread each) and the cold compile overlaps the others."""
    work = tmp_path_factory.mktemp("options")
    started = {
        name: launch_trainer(
            work,
            0,
            [f"trainer.max_steps={STEPS}", *overrides],
            run_dir=str(work / name),
            env={"OMP_NUM_THREADS": "1"},
        )
        for name, overrides in VARIANTS.items()
    }
    finished = {name: process.finish() for name, process in started.items()}
    for name, result in finished.items():
        assert result.returncode == 0, f"{name}:\n{result.stderr}"
    return {name: losses_by_step(result.run_dir) for name, result in finished.items()}


def test_plain_run_trains(losses):
    assert sorted(losses["plain"]) == list(range(1, STEPS + 1))
    assert losses["plain"][STEPS] < losses["plain"][1]


@pytest.mark.parametrize("variant", ["ac_full", "ac_selective", "ac_selective_op"])
def test_activation_checkpointing_gives_bit_identical_losses(losses, variant):
    assert losses[variant] == losses["plain"]


def test_compiled_blocks_give_the_same_losses_within_tolerance(losses):
    assert sorted(losses["compile"]) == sorted(losses["plain"])
    for step, loss in losses["plain"].items():
        assert losses["compile"][step] == pytest.approx(loss, rel=COMPILE_RTOL, abs=0), step


def test_bf16_parameters_train_on_cpu(losses):
    bf16 = losses["bf16"]
    assert sorted(bf16) == list(range(1, STEPS + 1))
    assert all(math.isfinite(loss) for loss in bf16.values())
    assert all(bf16[step + 1] < bf16[step] for step in range(1, STEPS))
    # bf16 really was in effect: its rounding shows in the losses.
    assert bf16 != losses["plain"]


@pytest.fixture
def one_rank_mesh(tmp_path: Path):
    """A real one-process gloo group, so `parallelize` can shard in this process."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("choice", "wrapped"),
    [("none", []), ("full", [0, 1, 2, 3]), ("selective", [0, 2]), ("selective_op", [0, 1, 2, 3])],
)
def test_the_options_reach_the_blocks(one_rank_mesh, choice, wrapped):
    """What makes the equal-loss runs above meaningful: the blocks really are wrapped for
    recompute and compiled."""
    args = ModelArgs(
        dim=32,
        n_layers=4,
        n_heads=2,
        n_kv_heads=2,
        vocab_size=64,
        ffn_hidden_dim=64,
        max_seq_len=16,
    )
    with torch.device("meta"):
        model = Transformer(args)
    parallelize(
        model,
        one_rank_mesh,
        mixed_precision="fp32",
        activation_checkpoint=choice,
        compile_blocks=True,
    )
    blocks = list(model.layers)
    assert [i for i, b in enumerate(blocks) if isinstance(b, CheckpointWrapper)] == wrapped
    assert all(block._compiled_call_impl is not None for block in blocks)
