"""Peak FLOP/s of one device for MFU, always labelled with where it came from.

Sources, in order: `trainer.peak_tflops` ("config"); the exact table of GPU models
(`contract.gpu_peaks`, "table:<model>"). A device without either — an unknown GPU, or a CPU,
whose peak no table states and a start-up measurement only guesses (it read 30-40% on one run
and 119.6% on another here) — gets no MFU (null, and one note at start-up) rather than a
number that is noise.
"""

from __future__ import annotations

import torch

from contract.gpu_peaks import gpu_peak_flops


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
    return None, device_type


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
