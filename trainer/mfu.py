"""Peak FLOP/s of one device for MFU, always labelled with where it came from.

Sources, in order: `trainer.peak_flops` ("config"); the table of known GPUs below
("table:<gpu>", `trainer.gpu_peaks`); on CPU a short matmul
measurement ("measured-cpu"). An unknown GPU without a configured peak gets no MFU (null and
a warning) rather than some other device's number.
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


def peak_flops(device: torch.device, configured: float | None) -> tuple[float | None, str]:
    """(peak FLOP/s or None, its source label)."""
    if configured:
        return configured, "config"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if known := gpu_peak_flops(name):
            return known[1], f"table:{known[0]}"
        return None, f"unknown-gpu:{name}"
    return measure_cpu_flops(), "measured-cpu"


def max_memory_gb(device: torch.device) -> float:
    """Peak allocated device memory; on CPU the process's peak resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
