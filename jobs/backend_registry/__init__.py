"""The backend registry: where a materialized job goes. One table names the backends, as
TorchX's scheduler table does; every other list of backend names (the schema's ConfigStore
entries, the launcher configs', the help's, `runs`') reads `NAMES`, and the pipeline asks a
backend's traits instead of comparing its name.

It sits on the floor below the launch pipeline, apart from the backends' homes
(jobs/backends/, the floor above it): statically it imports only its traits (`traits`), and
it reaches a home by name, when asked (`traits_of`, `hook`, `backend_for`).

A backend is a package under jobs/backends/: its `__init__` holds its `TRAITS`
(jobs.backend_registry.traits.BackendTraits: the one-line describe, the traits, its options
dataclass and their checks) and imports nothing heavy; its `backend` module holds the
implementation as `BACKEND` (the verbs of jobs.backends.base.Backend, plus
`from_config(cfg, shared=None)`, `shared` a `Shared`). That module is imported only when the
backend is chosen, for start-up time: the kubernetes one loads the cluster client, and `launch`
with another backend, the completion and the Training API's light paths never need it. A new
backend is one package, one line here and its option file `conf/backend/<name>.yaml`
(`defaults: [/trainstack_backend_<name>@_here_, _self_]`, as a runner's).
"""

from __future__ import annotations

import copy
import importlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from omegaconf import OmegaConf

from jobs.backend_registry.traits import SCHEMA_PREFIX, BackendOptions, BackendTraits

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


def hook(entry: str) -> Any:
    """A traits entry `module:attribute` (jobs.backend_registry.traits.ClusterSide,
    `job_checks`...), its module imported now: the pipeline reaches a backend's home only
    through its traits."""
    module, _, attribute = entry.partition(":")
    return getattr(importlib.import_module(module), attribute)


def described() -> str:
    """One line per backend: its name and where it sends a job (help texts)."""
    width = max(map(len, NAMES))
    return "\n".join(f"{name:<{width}} : {traits_of(name).describe}" for name in NAMES)


def register(store: Any) -> None:
    """Each backend's options into Hydra's ConfigStore (its option file starts from them)."""
    for name in NAMES:
        store.store(name=f"{SCHEMA_PREFIX}{name}", node=traits_of(name).options)


def configured(cfg: Any, name: str) -> Any:
    """`cfg` as backend `name` reads it: itself where its `backend` section is that backend's,
    else a copy whose section is that backend's defaults with the keys every backend has taken
    from `cfg` (`runs` and `cancel` consult every backend from one composition)."""
    if cfg.backend.name == name:
        return cfg
    options = OmegaConf.structured(traits_of(name).options)
    for key in BackendOptions.fields() - {"name"}:
        options[key] = cfg.backend[key]
    out = copy.deepcopy(cfg)
    OmegaConf.set_readonly(out, False)
    out.backend = options
    return out


def recorded_backend(cfg: Any, record: dict[str, Any]) -> dict[str, Any]:
    """A relaunch of a recorded run: `cfg.backend` takes the recorded backend's options (the
    line may not name the backend: `run_id=X` alone), and the record's `backend` section keeps
    only that backend's keys (a record written before each backend had its own options holds
    every backend's keys, those of the others at their defaults)."""
    section = record.get("backend")
    name = section.get("name") if isinstance(section, dict) else None
    if name not in BACKENDS:
        return record  # not a backend we know: the merge and validation say so
    own = traits_of(name).options
    if OmegaConf.get_type(cfg.backend) is not own:
        cfg.backend = own()
    return {**record, "backend": {k: v for k, v in section.items() if k in own.fields()}}


def backend_class(name: str) -> Any:
    """The backend class named `name`, its module imported now (start-up time: see above)."""
    _package(name)
    return importlib.import_module(f"{BACKENDS[name]}.backend").BACKEND


def backend_named(name: str, cfg: Any, shared: Shared | None = None) -> Any:
    """The backend `name` made from the composed config (`configured` for it)."""
    return backend_class(name).from_config(configured(cfg, name), shared=shared)


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
