"""The runner registry: `runner=<name>` -> its module in this package (torchx's scheduler
table, found rather than written: a module here that defines `RUNNER` is a runner).

A new runner is its module here (options, checks, describe, pod program), its option file
`conf/runner/<name>.yaml` (`defaults: [/trainstack_runner_<name>@_here_, _self_]`) and its
trainer side, if any. Every list of runner names (the schema's ConfigStore entries, the API
model, validation's "allowed") is `names()`; nothing else compares runner names.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any

from omegaconf import OmegaConf

from jobs.errors import JobConfigError
from jobs.runners.base import Runner, RunnerOptions

DEFAULT = "trainstack"
"""The runner `conf/config.yaml` picks; listed first, the others by name."""


@functools.cache
def registry() -> dict[str, Runner]:
    """Every runner module of this package, imported once (each is light: no torch)."""
    found: dict[str, Runner] = {}
    for info in pkgutil.iter_modules(__path__):
        runner = getattr(importlib.import_module(f"{__name__}.{info.name}"), "RUNNER", None)
        if isinstance(runner, Runner):
            found[runner.name] = runner
    return {name: found[name] for name in sorted(found, key=lambda n: (n != DEFAULT, n))}


def names() -> tuple[str, ...]:
    return tuple(registry())


def runner_named(name: str) -> Runner:
    """The runner called `name`; one line naming the allowed ones for any other."""
    runner = registry().get(name)
    if runner is None:
        raise JobConfigError(
            "runner.name", f"unknown runner {name!r}; allowed: {', '.join(names())}"
        )
    return runner


def runner_for(cfg: Any) -> Runner:
    """The runner of a composed job config."""
    return runner_named(cfg.runner.name)


def register(store: Any) -> None:
    """Each runner's options into Hydra's ConfigStore (its option file starts from them)."""
    for runner in registry().values():
        store.store(name=runner.schema_name, node=runner.options)


def check_runner(cfg: Any) -> dict[str, Any] | None:
    """The `runner` section's checks, then the runner's own; returns what they read for the
    plan (runner=hf: its checkpoint's config.json where launch read it), else None."""
    options = cfg.runner
    runner = runner_for(cfg)
    typed = OmegaConf.get_type(options)
    if isinstance(typed, type) and issubclass(typed, RunnerOptions) and typed is not runner.options:
        raise JobConfigError(
            "runner.name",
            f"is {runner.name!r} on runner={typed.name}'s options; allowed: pick the runner "
            f"with runner={runner.name} (the group), not runner.name",
        )
    for key in options:  # `+runner.<key>=` adds what no option has: refuse, not ignore
        if key not in runner.options.fields():
            raise JobConfigError(f"runner.{key}", runner.options.unknown_key())
    if options.code is not None and options.get("workdir") is None:
        raise JobConfigError(
            "runner.code", "is set by the launcher from runner.workdir; allowed: null"
        )
    return runner.check(cfg)


def recorded_runner(cfg: Any, record: dict[str, Any]) -> dict[str, Any]:
    """A relaunch of a recorded run: `cfg.runner` takes the recorded runner's options (the
    line may not name the runner: `run_id=X` alone), and the record's `runner` section keeps
    only that runner's keys (a record written before each runner had its own options holds
    every runner's keys; validation kept those of the others at their defaults)."""
    section = record.get("runner")
    runner = registry().get(section.get("name")) if isinstance(section, dict) else None
    if runner is None:
        return record  # not a runner we know: the merge and validation say so
    if OmegaConf.get_type(cfg.runner) is not runner.options:
        cfg.runner = runner.options()
    fields = runner.options.fields()
    return {**record, "runner": {k: v for k, v in section.items() if k in fields}}
