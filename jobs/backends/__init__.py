"""Backends: where a materialized job goes. One table names them, as TorchX's scheduler table
does; every other list of backend names (the schema's, the launcher configs', `runs`') reads
`NAMES`, and the pipeline asks a backend's traits instead of comparing its name.

A backend is a package under jobs/backends/: its `__init__` holds its `TRAITS`
(jobs.backends.traits.BackendTraits) and imports nothing else; its `backend` module holds the
implementation as `BACKEND` (the verbs of jobs.backends.base.Backend, plus
`from_config(cfg, shared=None)`, `shared` a `Shared`). That module is imported only when the
backend is chosen, for start-up time: the kubernetes one loads the cluster client, and
`launch` with another backend, the completion and the Training API's light paths never need it.
A new backend is one package and one line here.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from jobs.backends.traits import BackendTraits

BACKENDS: dict[str, str] = {
    "local": "jobs.backends.local",
    "render": "jobs.backends.render",
    "kubernetes": "jobs.backends.kubernetes",
}
"""`backend.name` -> its package."""
NAMES = tuple(BACKENDS)


def _package(name: str) -> Any:
    if name not in BACKENDS:
        raise ValueError(f"backend.name: unknown backend {name!r}; allowed: {', '.join(NAMES)}")
    return importlib.import_module(BACKENDS[name])


def traits_of(name: str) -> BackendTraits:
    """The traits of the backend named `name` (its light package only)."""
    return _package(name).TRAITS


def backend_class(name: str) -> Any:
    """The backend class named `name`, its module imported now (start-up time: see above)."""
    _package(name)
    return importlib.import_module(f"{BACKENDS[name]}.backend").BACKEND


def backend_for(cfg: Any, shared: Shared | None = None) -> Any:
    """The backend (a jobs.backends.base.Backend) named by `cfg.backend.name`, made from the
    composed config; `shared`: what it shares with the other backends its owner makes."""
    return backend_class(cfg.backend.name).from_config(cfg, shared=shared)


T = TypeVar("T")


class Shared:
    """What the backends one owner makes share, each backend's part under its name: the
    launch's (jobs.app.LaunchTask: a sweep's points are scheduled by one backend and followed,
    and restarted, by another) or the Training API service's, for its lifetime. An owner
    holds it, never a class or a module, so two owners share nothing."""

    def __init__(self) -> None:
        self._parts: dict[str, Any] = {}
        self._lock = threading.Lock()

    def part(self, name: str, make: Callable[[], T]) -> T:
        """Backend `name`'s part, made by `make()` the first time it is asked for."""
        with self._lock:
            if name not in self._parts:
                self._parts[name] = make()
            return self._parts[name]
