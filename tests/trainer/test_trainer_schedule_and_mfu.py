"""The learning-rate schedule's shape and where the MFU peak comes from."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from trainer.config import TrainerConfig
from trainer.mfu import device_peak_flops
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
    measured, source = device_peak_flops(torch.device("cpu"), None)
    assert source == "measured-cpu" and measured > 1e8
