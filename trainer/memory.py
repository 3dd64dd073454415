"""Peak memory per logging window, as the max across ranks.

GPU: peak allocated and reserved bytes of the caching allocator. CPU: the peak resident set
size (VmHWM), which Linux resets when "5" is written to /proc/self/clear_refs. Each window's
peaks are reset after they are read, so a figure is that window's, not the run's so far; and
the logged figure is the largest rank's (one all-reduce per window), since the rank that runs
out of memory is the one that matters, not rank 0.
"""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

import torch
import torch.distributed as dist

GIB = 2**30
_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def peak_memory(device: torch.device) -> dict[str, float]:
    """This rank's peaks since the last reset, named `memory/<what>_gib`."""
    if device.type == "cuda":
        return {
            "memory/max_allocated_gib": torch.cuda.max_memory_allocated(device) / GIB,
            "memory/max_reserved_gib": torch.cuda.max_memory_reserved(device) / GIB,
        }
    return {"memory/max_rss_gib": _peak_rss_bytes() / GIB}


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    # Not Linux, or not allowed: the figure stays the peak since start.
    with contextlib.suppress(OSError):
        _CLEAR_REFS.write_text("5")


def _peak_rss_bytes() -> int:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def max_across_ranks(figures: dict[str, float], device: torch.device) -> dict[str, float]:
    """Each figure's maximum over all ranks, in one all-reduce."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return dict(figures)
    values = torch.tensor(list(figures.values()), dtype=torch.float64, device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return dict(zip(figures, values.tolist(), strict=True))


def window_peak_memory(device: torch.device) -> dict[str, float]:
    """The logging window's peaks, max across ranks; starts the next window. Every rank
    calls it (a collective)."""
    figures = max_across_ranks(peak_memory(device), device)
    reset_peak_memory(device)
    return figures
