"""GPU instance types trainstack knows, with the facts both jobs and infra depend on.

Prices are approximate us-east-1 on-demand Linux list prices (USD per hour) as of
`PRICES_AS_OF`; they feed estimates only. Override per job with `compute.hourly_usd`.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_AS_OF = "2026-11"
SPOT_DISCOUNT = 0.6
"""Spot estimate: on-demand less this share. A stated assumption (GPU spot prices move by
region, zone and hour, typically 50-70% below on-demand); `compute.hourly_usd` overrides."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    """NVIDIA GPUs per instance."""
    gpu_model: str
    """A model name of `contract.gpu_peaks` (its one table of peaks)."""
    gpu_memory_gib: int
    """Memory of one GPU."""
    vcpus: int
    memory_gib: int
    efa_interfaces: int
    """Maximum EFA interfaces; 0 means the instance has no EFA."""
    network_cards: int
    """Network cards; with EFA, one interface goes on each card."""
    gpudirect_rdma: bool
    """EFA supports GPUDirect RDMA (sets FI_EFA_USE_DEVICE_RDMA=1)."""
    hourly_usd: float

    @property
    def has_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def spot_hourly_usd(self) -> float:
        return round(self.hourly_usd * (1 - SPOT_DISCOUNT), 3)


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("g5.12xlarge", 4, "A10G", 24, 48, 192, 1, 1, False, 5.672),
        InstanceType("g5.48xlarge", 8, "A10G", 24, 192, 768, 1, 1, False, 16.288),
        InstanceType("g6e.48xlarge", 8, "L40S", 48, 192, 1536, 4, 4, False, 30.131),
        InstanceType("p4d.24xlarge", 8, "A100 40GB", 40, 96, 1152, 4, 4, True, 21.958),
        InstanceType("p4de.24xlarge", 8, "A100 80GB", 80, 96, 1152, 4, 4, True, 27.447),
        InstanceType("p5.48xlarge", 8, "H100 SXM", 80, 192, 2048, 32, 32, True, 55.040),
        InstanceType("p5e.48xlarge", 8, "H200", 141, 192, 2048, 32, 32, True, 60.740),
        InstanceType("p5en.48xlarge", 8, "H200", 141, 192, 2048, 16, 16, True, 63.296),
    )
}


def get_instance_type(name: str) -> InstanceType:
    """Return the catalog entry for `name`, or raise KeyError listing the known types."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise KeyError(f"unknown instance type {name!r}; known: {known}") from None
