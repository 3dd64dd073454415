"""Honest figures: phase timings close after a device synchronize, MFU's peak comes from an
exact table of GPU names (null for an unknown one), and memory is each window's peak, the
max across ranks."""

from __future__ import annotations

import json
import subprocess

import pytest

from contract.gpu_peaks import GPU_PEAK_FLOPS, gpu_peak_flops
from tests.trainer.harness import BIN, REPO, read_metrics
from trainer.mfu import mfu_percent, peak_flops
from trainer.step_timer import PHASES, StepTimer


def test_each_phase_is_closed_after_a_device_synchronize():
    events: list[str] = []
    ticks = iter(range(100))

    def clock() -> float:
        events.append("clock")
        return float(next(ticks))

    timer = StepTimer(synchronize=lambda: events.append("sync"), clock=clock)
    with timer.phase("forward_backward"):
        events.append("work")
    assert events == ["clock", "work", "sync", "clock"]


def test_window_reports_mean_seconds_per_phase_and_resets():
    now = [0.0]
    timer = StepTimer(synchronize=lambda: None, clock=lambda: now[0])
    for _ in range(2):
        for name, seconds in zip(PHASES, (0.5, 2.0, 1.0, 0.25), strict=True):
            with timer.phase(name):
                now[0] += seconds
        timer.step_done()
    assert timer.steps == 2 and timer.seconds == pytest.approx(7.5)
    figures = timer.close_window()
    assert figures == {
        "time/data_wait_s": 0.5,
        "time/forward_backward_s": 2.0,
        "time/optimizer_s": 1.0,
        "time/checkpoint_stall_s": 0.25,
        "time/step_s": 3.75,
    }
    assert timer.steps == 0 and timer.seconds == 0


@pytest.mark.parametrize(
    ("device_name", "model", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", "H100 NVL", 835.0),
        ("NVIDIA H200", "H200", 989.4),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB", 312.0),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB", 312.0),
        ("NVIDIA L40S", "L40S", 362.05),
        ("NVIDIA A10G", "A10G", 70.0),
        ("NVIDIA L4", "L4", 121.0),
        ("NVIDIA B200", "B200", 2250.0),
    ],
)
def test_known_device_names_map_exactly_to_their_peak(device_name, model, tflops):
    assert gpu_peak_flops(device_name) == (model, pytest.approx(tflops * 1e12))
    assert peak_flops("cuda", device_name, None) == (GPU_PEAK_FLOPS[model], f"table:{model}")


@pytest.mark.parametrize(
    "device_name",
    ["NVIDIA GeForce RTX 4090", "NVIDIA H100-like prototype", "H100", "NVIDIA A100", ""],
)
def test_an_unknown_device_has_no_peak_and_a_null_mfu(device_name):
    assert gpu_peak_flops(device_name) is None  # never another model's figure by substring
    peak, source = peak_flops("cuda", device_name, None)
    assert peak is None and source == f"unknown-gpu:{device_name}"
    assert mfu_percent(1000.0, 6e9, peak) is None


def test_configured_peak_tflops_overrides_the_table():
    assert peak_flops("cuda", "NVIDIA H100 80GB HBM3", 500.0) == (500e12, "config")
    assert peak_flops("cpu", None, 0.5) == (0.5e12, "config")
    assert mfu_percent(1000.0, 1e9, 1e13) == pytest.approx(10.0)


def test_memory_is_each_windows_peak_and_the_max_across_ranks(tmp_path):
    from tests.trainer.memory_worker import BIG_MIB

    worker = REPO / "tests/trainer/memory_worker.py"
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", str(worker), str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    key = "memory/max_rss_gib"
    big = BIG_MIB / 1024
    # Rank 0 never held the buffer, yet reports rank 1's peak: the max across ranks.
    assert ranks[1]["own_first"][key] > ranks[0]["own_first"][key] + 0.8 * big
    assert ranks[0]["first"] == ranks[1]["first"] == {key: ranks[1]["own_first"][key]}
    # The next window starts from a reset: the buffer freed in the first is not in it.
    assert ranks[0]["second"][key] < ranks[0]["first"][key] - 0.8 * big


def test_a_run_logs_the_step_split_and_memory(run_trainer):
    result = run_trainer(2, ["trainer.max_steps=4", "trainer.log_interval=2"])
    assert result.returncode == 0, result.stderr
    train = [r for r in read_metrics(result.run_dir) if "loss" in r]
    assert [r["step"] for r in train] == [2, 4]
    for record in train:
        phases = sum(record[f"time/{name}_s"] for name in PHASES)
        assert record["time/step_s"] == pytest.approx(phases)
        assert record["time/forward_backward_s"] > 0 and record["memory/max_rss_gib"] > 0
        tokens_per_step = 2 * 2 * 32  # micro 2 x dp 2 x seq_len 32
        throughput = tokens_per_step / record["time/step_s"]
        assert record["throughput/tokens_per_s"] == pytest.approx(throughput)
        assert record["mfu/peak_source"] == "config" and record["mfu/percent"] > 0
