"""Dense (no sparsity) bf16 tensor-core peak FLOP/s per GPU model, from NVIDIA's data sheets.

The one table of GPU peaks: the trainer's MFU and the job launcher's step-time estimate both
read it, so it stays torch-free. A GPU missing here has no peak (never some other device's).
A10G is absent on purpose: AWS's A10G variant has no published bf16 figure of its own.
"""

from __future__ import annotations

GPU_PEAK_FLOPS: dict[str, float] = {
    "H200": 989.4e12,
    "H100": 989.4e12,  # SXM5, as in p5.48xlarge
    "A100": 312e12,
    "L40S": 362.05e12,
}


def gpu_peak_flops(device_name: str) -> tuple[str, float] | None:
    """(table key, peak FLOP/s) of the first known model named in `device_name`, else None."""
    for gpu, peak in GPU_PEAK_FLOPS.items():
        if gpu in device_name:
            return gpu, peak
    return None
