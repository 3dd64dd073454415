"""The default job (contract/config.py defaults, sample corpus, 2 CPU processes) learns: the
training loss falls from ~5.6 (uniform over 257 byte tokens) below 2.1, the held-out loss
below 2.0, and the run leaves its resolved config, metrics and a final checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from contract.config import TrainerConfig
from tests.trainer.harness import committed_steps, read_metrics

pytestmark = pytest.mark.slow

LOSS_BELOW = 2.1
EVAL_LOSS_BELOW = 2.0


def test_default_job_loss_falls_below_threshold(run_trainer):
    result = run_trainer(2, [], small=False)
    assert result.returncode == 0, result.stderr
    records = read_metrics(result.run_dir)
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    steps = TrainerConfig().max_steps
    assert train[-1]["step"] == steps and evals[-1]["step"] == steps
    assert train[0]["loss"] > math.log(257) - 1.5  # started near chance
    assert train[-1]["loss"] < LOSS_BELOW, train[-1]
    assert evals[-1]["eval_loss"] < EVAL_LOSS_BELOW, evals[-1]
    for key in ("lr", "grad_norm", "throughput/tokens_per_s"):
        assert train[-1][key] > 0, key
    assert train[-1]["memory/max_rss_gib"] > 0
    assert (train[-1]["mfu/percent"], train[-1]["mfu/peak_source"]) == (None, "cpu")
    run_dir = Path(result.run_dir)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["trainer"]["max_steps"] == steps and saved["run_dir"] == result.run_dir
    assert committed_steps(run_dir)[-1] == steps
