"""The learning-rate schedule's shape and where the MFU peak comes from."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from contract.config import TrainerConfig
from tests.trainer.harness import read_metrics
from trainer.mfu import device_peak_flops, mfu_percent, peak_flops
from trainer.optim import lr_factor


def test_linear_warmup_then_cosine_down_to_the_floor():
    cfg = TrainerConfig(max_steps=110, warmup_steps=10, min_lr_ratio=0.1)
    factors = [lr_factor(step, cfg) for step in range(cfg.max_steps)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[10] == pytest.approx(1.0)
    assert factors[60] == pytest.approx(0.55)  # half-way down the cosine
    assert all(a >= b for a, b in pairwise(factors[10:]))
    assert lr_factor(cfg.max_steps, cfg) == pytest.approx(0.1)


def test_mfu_peak_is_labelled_by_its_source():
    assert device_peak_flops(torch.device("cpu"), 3.5) == (3.5e12, "config")
    # No table states a CPU's peak: no MFU rather than noise.
    assert device_peak_flops(torch.device("cpu"), None) == (None, "cpu")
    assert mfu_percent(5000.0, 6e7, None) is None


def test_a_known_gpu_peak_gives_mfu_from_throughput_and_flops_per_token():
    peak, source = peak_flops("cuda", "NVIDIA H100 80GB HBM3", None)
    assert source == "table:H100 SXM" and peak == pytest.approx(989.4e12)
    # 40k tokens/s/GPU x 6 GFLOPs/token = 240 TFLOP/s of 989.4: 24.26%.
    assert mfu_percent(40_000.0, 6e9, peak) == pytest.approx(100 * 240e12 / 989.4e12)


def test_a_cpu_run_logs_null_mfu_with_one_note(run_trainer):
    result = run_trainer(0, ["trainer.peak_tflops=null", "trainer.max_steps=2"])
    assert result.returncode == 0, result.stderr
    train = [r for r in read_metrics(result.run_dir) if "loss" in r]
    assert train and all(r["mfu/percent"] is None for r in train)
    assert {r["mfu/peak_source"] for r in train} == {"cpu"}
    note = "MFU logged as null: cpu has no known peak; set trainer.peak_tflops"
    assert result.stdout.count(note) == 1, result.stdout
