"""Dense (no sparsity) bf16 tensor-core peak FLOP/s per GPU model, from NVIDIA's data sheets.

The one table of GPU peaks: the trainer's MFU, the job launcher's step-time estimate and the
catalog's `gpu_model` names all use the model names below, so it stays torch-free. Lookups
are exact — a name missing here has no peak, never some other device's (a substring match
would give an H100 PCIe the SXM's figure, and any "H100-like" name the H100's).
"""

from __future__ import annotations

GPU_PEAK_FLOPS: dict[str, float] = {
    "H100 SXM": 989.4e12,  # p5.48xlarge
    "H100 PCIe": 756.0e12,
    "H100 NVL": 835.0e12,  # per GPU of the NVL pair
    "H200": 989.4e12,  # p5e/p5en: the H100 SXM's compute with more memory
    "A100 40GB": 312e12,  # p4d
    "A100 80GB": 312e12,  # p4de
    "L40S": 362.05e12,  # g6e
    "A10G": 70e12,  # g5: AWS's A10 variant with fewer tensor FLOPs than the A10's 125
    "L4": 121e12,  # g6
    "B200": 2250e12,
}

DEVICE_NAMES: dict[str, str] = {
    # What `torch.cuda.get_device_name()` (and nvidia-smi) reports -> the model above.
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200",
    "NVIDIA A100-SXM4-40GB": "A100 40GB",
    "NVIDIA A100-PCIE-40GB": "A100 40GB",
    "NVIDIA A100-SXM4-80GB": "A100 80GB",
    "NVIDIA A100 80GB PCIe": "A100 80GB",
    "NVIDIA L40S": "L40S",
    "NVIDIA A10G": "A10G",
    "NVIDIA L4": "L4",
    "NVIDIA B200": "B200",
}


def gpu_model(device_name: str) -> str | None:
    """The table's model for a device name as the driver reports it (or a model name
    itself, as the catalog uses), else None."""
    if device_name in GPU_PEAK_FLOPS:
        return device_name
    return DEVICE_NAMES.get(device_name.strip())


def gpu_peak_flops(device_name: str) -> tuple[str, float] | None:
    """(model, peak FLOP/s) of exactly this device or model name, else None."""
    model = gpu_model(device_name)
    return None if model is None else (model, GPU_PEAK_FLOPS[model])
