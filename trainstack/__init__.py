"""trainstack from Python: launch and sweep from code, and one run handle for every backend
and for the Training API.

    import trainstack

    run = trainstack.launch("trainer.max_steps=10", values={"trainer.lr": 3e-4})
    run.wait(timeout=600)            # RunStatus, or RunFailed / WaitTimeout
    run.metrics()[-1]["loss"]
    trainstack.run(run.id).relaunch("trainer.max_steps=20")

A launch is `trainstack launch`'s own path (compose, the run's record, validate, plan, the
backend's dry run and schedule: jobs/inprocess.py), on the backend the config names; bad
input raises `ConfigError` naming the key, with nothing written. `Client(url, token)` does
the same against a Training API over HTTP, with the same types and exceptions.

This module is the whole public surface (`__all__`); the work lives in jobs/. Importing it
loads neither torch nor a Kubernetes client (the import-linter contract in pyproject.toml),
nor Hydra (tests/python_api/test_shape.py): the in-process place (trainstack/_here.py)
is loaded by name on the first call that needs it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from trainstack._client import Client
from trainstack._run import Home, Run, RunStatus, Sweep
from trainstack.errors import (
    ConfigError,
    RunFailed,
    RunNotFound,
    SubmitError,
    TrainstackError,
    WaitTimeout,
)

__all__ = [
    "Client",
    "ConfigError",
    "Run",
    "RunFailed",
    "RunNotFound",
    "RunStatus",
    "SubmitError",
    "Sweep",
    "TrainstackError",
    "WaitTimeout",
    "launch",
    "run",
    "runs",
    "sweep",
]

Value = str | int | float | bool | None
"""A value of `values=` and `axes=`: quoted as data, never read as override grammar."""


def _place(where: Sequence[str] = (), backend: str | None = None) -> Home:
    """This process's place (trainstack._here.Here); its module by name, on first use
    (start-up time: it loads the launch pipeline and Hydra)."""
    here = importlib.import_module("trainstack._here").Here(tuple(where), backend)
    return cast(Home, here)


def launch(
    *overrides: str,
    values: Mapping[str, Value] | None = None,
    dryrun: bool = False,
    wait: bool = False,
    skip_preflight: bool = False,
    force: bool = False,
    program: Callable[..., Any] | None = None,
    args: Mapping[str, Any] | None = None,
    workdir: str | os.PathLike[str] | None = None,
) -> Run:
    """Launch one run, as `trainstack launch [flags] OVERRIDES` does.

    `overrides`: Hydra override strings (`"model=tiny"`, `"trainer.max_steps=10"`);
    `values`: `{key: value}` set as data (a string is never parsed as grammar). `dryrun`:
    the returned Run has the plan and the request (`run.plan`, `run.request`) and nothing is
    written or started. `wait`: return once the run succeeded (RunFailed if it did not).
    `skip_preflight`, `force`: the CLI's `--skip-preflight`, `--force` (kubernetes).
    `program`: a module-level function of `workdir` (default: the current directory) run as
    `program(**args)` on every rank through runner=command, by its import path from the
    workdir's archive (a lambda, a closure or a function outside it is a ConfigError).
    A run id of an existing run resumes it with its own recorded config."""
    return _place().submit(
        overrides,
        values,
        dryrun=dryrun,
        wait=wait,
        skip_preflight=skip_preflight,
        force=force,
        program=program,
        args=args,
        workdir=workdir,
    )


def sweep(
    *overrides: str,
    axes: Mapping[str, Sequence[Value]],
    values: Mapping[str, Value] | None = None,
    sweep_id: str | None = None,
) -> Sweep:
    """One run per point of the grid `axes` (`{"trainer.lr": [1e-3, 3e-3]}`), each with
    `overrides` and `values`; all or nothing, as `POST /v1/sweeps`: every point is validated
    before the first is started, and a point that cannot be started stops those before it."""
    return _place().submit_sweep(overrides, values, axes, sweep_id)


def run(run_id: str, *where: str, backend: str | None = None) -> Run:
    """Re-attach to a run by id from any process; `where`: overrides selecting the stack or
    cluster (`"stack=prod"`), `backend`: only that backend. RunNotFound if none knows it."""
    return _place(where, backend).find(run_id)


def runs(
    *where: str,
    sweep: str | None = None,
    state: str | None = None,
    backend: str | None = None,
) -> list[Run]:
    """The runs `trainstack runs` lists (oldest first), filtered by sweep id and state."""
    return _place(where, backend).listed(sweep, state)
