"""What the checks share: how a list of allowed values reads, the bounds every integer key
has, and whether the job runs in pods."""

from __future__ import annotations

from typing import Any

from jobs.backend_registry import traits_of
from jobs.errors import JobConfigError


def listed(values: Any) -> str:
    return ", ".join(str(v) for v in values)


def at_least(key: str, value: int | None, minimum: int) -> None:
    if value is not None and value < minimum:
        raise JobConfigError(key, f"must be >= {minimum}, got {value}")


def at_most(key: str, value: int | None, maximum: int) -> None:
    if value is not None and value > maximum:
        raise JobConfigError(key, f"must be <= {maximum}, got {value}")


def in_pods(cfg: Any) -> bool:
    """The job runs in the cluster's pods (render, kubernetes), not on this machine."""
    return traits_of(cfg.backend.name).pods
