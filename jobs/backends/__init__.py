"""Backends: where a materialized job goes. One table names them, as TorchX's scheduler table
does; every other list of backend names (the schema's, the launcher configs', `runs`') reads
`NAMES`, and the pipeline asks a backend's traits instead of comparing its name.

A backend is a package under jobs/backends/: its `__init__` holds its `TRAITS`
(jobs.backends.traits.BackendTraits) and imports nothing else; its `backend` module holds the
implementation as `BACKEND` (the verbs of jobs.backends.base.Backend, plus
`from_config(cfg)`). That module is imported only when the backend is chosen, for start-up
time: the kubernetes one loads the cluster client, and `launch` with another backend, the
completion and the Training API's light paths never need it. A new backend is one package and
one line here.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def backend_for(cfg: Any) -> Any:
    """The backend (a jobs.backends.base.Backend) named by `cfg.backend.name`, made from the
    composed config."""
    return backend_class(cfg.backend.name).from_config(cfg)
