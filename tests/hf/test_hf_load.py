"""model.init_from: the trainer's logits on Hugging Face Llama weights equal transformers'."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from testing_support.hf_models import assert_close, build_llama, fixed_batch, hf_logits

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def trainer_logits(tmp_path: Path, nproc: int, *mode: str) -> torch.Tensor:
    out = tmp_path / f"logits-{nproc}-{len(list(tmp_path.glob('logits-*')))}.pt"
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={nproc}",
           "-m", "tests.hf.logits_worker", str(out), *mode]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_logits_equal_transformers_at_one_and_two_ranks(tmp_path: Path, tied: bool):
    source = build_llama(tmp_path / "hf", tied=tied)
    assert len(list(source.glob("model-*.safetensors"))) > 1  # the index path runs
    expected = hf_logits(source, fixed_batch())
    for nproc in (1, 2):
        assert_close(trainer_logits(tmp_path, nproc, "init", str(source)), expected)
