"""Backends: where a materialized job goes. `backend_for(cfg)` picks one by `backend.name`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.backends.base import Backend


def backend_for(cfg: Any) -> Backend:
    """The backend named by `cfg.backend.name`, imported only when chosen (kubernetes is heavy)."""
    name = cfg.backend.name
    if name == "local":
        from jobs.backends.local.backend import LocalBackend

        return LocalBackend(runs_root=cfg.storage.root)
    if name == "render":
        from jobs.backends.render import RenderBackend

        return RenderBackend(output_root=cfg.backend.output_root)
    if name == "kubernetes":
        from jobs.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend.from_config(cfg)
    raise ValueError(f"backend.name: unknown backend {name!r}; allowed: local, render, kubernetes")
