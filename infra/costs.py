"""What the GPU node groups cost per hour, from the catalog's on-demand prices (estimates:
spot and reserved capacity are billed differently; the system nodes and control plane are
not included).

The autoscaler moves each group between its minSize (idle: no job wants it) and its maxSize
(every node busy); desiredSize only sets the size at creation.
"""

from __future__ import annotations

from infra.settings.types import GpuNodeGroupConfig


def group_summary(group: GpuNodeGroupConfig) -> dict:
    """The per-group facts `jobs` needs (see `stack_defaults`), plus its hourly prices."""
    return {
        "name": group.name,
        "instance_type": group.instance.name,
        "gpus_per_node": group.instance.gpus,
        "min_size": group.min_size,
        "desired_size": group.desired_size,
        "max_size": group.max_size,
        "capacity_type": group.capacity_type,
        "hourly_usd_idle": round(group.min_size * group.instance.hourly_usd, 3),
        "hourly_usd_at_max": round(group.max_size * group.instance.hourly_usd, 3),
    }


def hourly_usd(groups: tuple[GpuNodeGroupConfig, ...], *, idle: bool = False) -> float:
    """All GPU groups at their maximum size, or idle (every group at its minimum)."""
    total = sum((g.min_size if idle else g.max_size) * g.instance.hourly_usd for g in groups)
    return round(total, 3)
