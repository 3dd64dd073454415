"""The plan's step-time estimate reads the trainer's one table of GPU peaks: a GPU without a
known peak gets no estimate (and says how to give one), never another device's figure."""

from __future__ import annotations

import pytest

from catalog import INSTANCE_TYPES
from tests.jobs.conftest import CLUSTER, build
from trainer.gpu_peaks import gpu_peak_flops


@pytest.mark.parametrize("instance_type", sorted(INSTANCE_TYPES))
def test_step_time_estimated_only_from_a_known_peak(instance_type):
    plan = build([f"compute={instance_type}", "model=llama3_1b", *CLUSTER]).plan
    gpu = INSTANCE_TYPES[instance_type].gpu_model
    if gpu_peak_flops(gpu) is None:
        assert plan.step_time_s is None
        assert f"no step time on {gpu} (no known peak)" in plan.step_time_source
        assert "compute.step_time_s" in plan.step_time_source
    else:
        assert plan.step_time_s > 0 and plan.step_time_source.startswith("estimated")
