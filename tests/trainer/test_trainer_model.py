"""The model's parameter count matches `ModelArgs.num_params()`, and its initial weights do
not depend on how many ranks share it."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from contract.model.args import MODEL_PRESETS
from tests.trainer.harness import BIN, REPO
from tests.trainer.init_worker import ARGS
from trainer.model.model import Transformer


def built_on_meta(args) -> Transformer:
    with torch.device("meta"):
        return Transformer(args)


@pytest.mark.parametrize("name", MODEL_PRESETS)
@pytest.mark.parametrize("tied", [True, False])
def test_parameter_count_matches_the_formula(name, tied):
    args = replace(MODEL_PRESETS[name], tie_embeddings=tied)
    model = built_on_meta(args)
    counted = sum(p.numel() for p in model.parameters())  # a tied table is counted once
    assert counted == args.num_params()
    embedding = model.tok_embeddings.weight.numel()
    assert counted - embedding == args.num_params(include_embedding=False)


def unsharded_init(seed: int) -> dict[str, torch.Tensor]:
    model = built_on_meta(replace(MODEL_PRESETS["tiny"], **ARGS))
    model.to_empty(device="cpu")
    model.init_weights(seed)
    return model.state_dict()


@pytest.mark.slow
def test_init_is_the_same_on_two_ranks_as_unsharded(tmp_path: Path):
    out = tmp_path / "two_ranks.pt"
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2",
           "tests/trainer/init_worker.py", str(out), "3"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    sharded = torch.load(out)
    expected = unsharded_init(seed=3)
    assert sorted(sharded) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(sharded[name], tensor), name
    other_seed = unsharded_init(seed=4)
    assert not torch.equal(other_seed["layers.0.attention.wq.weight"],
                           expected["layers.0.attention.wq.weight"])  # fmt: skip
