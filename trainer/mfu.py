"""Peak FLOP/s of one device for MFU, always labelled with where it came from.

Sources, in order: `trainer.peak_tflops` ("config"); the exact table of GPU models
(`trainer.gpu_peaks`, "table:<model>"); on CPU a short matmul measurement ("measured-cpu"). An
unknown GPU without a configured peak gets no MFU (null, and one note at start-up) rather
than some other device's number.
"""

from __future__ import annotations

import time

import torch

from trainer.gpu_peaks import gpu_peak_flops


def measure_cpu_flops(rounds: int = 3, seconds: float = 0.1, size: int = 1024) -> float:
    """Best fp32 matmul FLOP/s of this process's threads over a few short rounds (on shared
    cores, the best round is the closest to the hardware's peak)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = 0.0
    for _ in range(rounds):
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            a @ b
            count += 1
        best = max(best, 2 * size**3 * count / elapsed)
    return best


def peak_flops(
    device_type: str, device_name: str | None, configured_tflops: float | None
) -> tuple[float | None, str]:
    """(peak FLOP/s or None, its source label). `device_name`: the CUDA device's name."""
    if configured_tflops:
        return configured_tflops * 1e12, "config"
    if device_type == "cuda":
        if known := gpu_peak_flops(device_name or ""):
            return known[1], f"table:{known[0]}"
        return None, f"unknown-gpu:{device_name}"
    return measure_cpu_flops(), "measured-cpu"


def device_peak_flops(
    device: torch.device, configured_tflops: float | None
) -> tuple[float | None, str]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return peak_flops(device.type, name, configured_tflops)


def mfu_percent(tokens_per_s_per_device: float, flops_per_token: float, peak: float | None):
    """Model FLOPs utilization in percent, or None without a known peak."""
    if not peak:
        return None
    return 100 * tokens_per_s_per_device * flops_per_token / peak
