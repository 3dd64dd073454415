"""The plan's step-time estimate reads the trainer's one table of GPU peaks, and the
catalog names its GPUs as that table does, so every catalog instance gets an estimate and
no instance gets another model's figure."""

from __future__ import annotations

import pytest

from catalog import INSTANCE_TYPES
from contract.gpu_peaks import GPU_PEAK_FLOPS
from contract.model.args import MODEL_PRESETS
from tests.jobs.conftest import CLUSTER, build


@pytest.mark.parametrize("instance_type", sorted(INSTANCE_TYPES))
def test_step_time_estimated_from_the_catalog_gpus_exact_peak(instance_type):
    gpu = INSTANCE_TYPES[instance_type].gpu_model
    assert gpu in GPU_PEAK_FLOPS, f"catalog {instance_type}: {gpu!r} is not a gpu_peaks model"
    job = build([f"compute={instance_type}", "model=llama3_1b", *CLUSTER])
    plan = job.plan
    assert plan.step_time_source == f"estimated: FLOPs/token at 35% MFU of {gpu}"
    world = plan.nodes * plan.procs_per_node
    per_token = MODEL_PRESETS["llama3_1b"].training_flops_per_token(job.cfg.data.seq_len)
    expected = per_token * plan.tokens_per_step / (GPU_PEAK_FLOPS[gpu] * world * 0.35)
    assert plan.step_time_s == pytest.approx(expected)


def test_a_gpu_without_a_peak_gets_no_estimate(monkeypatch):
    from dataclasses import replace

    import catalog.instances

    unknown = replace(INSTANCE_TYPES["g5.12xlarge"], gpu_model="A10")  # not in the table
    monkeypatch.setitem(catalog.instances.INSTANCE_TYPES, "g5.12xlarge", unknown)
    plan = build(["compute=g5.12xlarge", "model=llama3_1b", *CLUSTER]).plan
    assert plan.step_time_s is None
    assert "no step time on A10 (no known peak)" in plan.step_time_source
