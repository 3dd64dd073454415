"""The export's direct DCP reader: each saved chunk read straight into its rows equals what
`dcp.load` gives, in the checkpoint's dtype and converted to bf16; a short file is an error.
(Chunks of several ranks are covered by the 2-rank fine-tune -> export tests.)"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from contract.checkpoints import METADATA
from trainer.hf.dcp_read import CheckpointTensors


def saved(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    state = {
        "model.a": torch.randn(37, 19, generator=generator),
        "model.b": torch.randn(64, generator=generator),
        "model.c": torch.randn(5, 3, 2, generator=generator),
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.save({k: v.clone() for k, v in state.items()}, checkpoint_id=tmp_path, no_dist=True)
    return tmp_path, state


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reads_equal_the_saved_tensors(tmp_path: Path, dtype: torch.dtype, monkeypatch):
    directory, state = saved(tmp_path)
    metadata = pickle.loads((directory / METADATA).read_bytes())
    with CheckpointTensors(directory, metadata) as tensors:
        # Whole-row chunks take the one-read path, never dcp.load's.
        monkeypatch.setattr(tensors, "_read_with_dcp", lambda *a: pytest.fail("dcp.load"))
        for key, expected in state.items():
            assert tensors.shape(key) == tuple(expected.shape)
            out = torch.full(expected.shape, float("nan"), dtype=dtype)
            tensors.read_into(key, out)
            assert torch.equal(out, expected.to(dtype)), key


def test_a_truncated_shard_is_an_error(tmp_path: Path):
    directory, state = saved(tmp_path)
    metadata = pickle.loads((directory / METADATA).read_bytes())
    (shard,) = directory.glob("*.distcp")
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with CheckpointTensors(directory, metadata) as tensors, pytest.raises((OSError, RuntimeError)):
        for key, expected in state.items():
            tensors.read_into(key, torch.empty(expected.shape))
