"""A Python function as a job's program (`trainstack.launch(program=train, args={...})`): the
function is named by its import path in the workdir, never pickled, and run on every rank by
`runner=command` from the workdir archive (jobs.workdir), so what runs is the code the launch
packed, on any backend. A lambda, a closure or a function outside the workdir has no import
path another process could use: refused in one line, before anything is written.

Every rank runs `python -u -c ENTRY`: it imports the function's module from the workdir copy
(the working directory of the rank) and calls it with the keyword arguments `args`, carried
as JSON in the environment (`PROGRAM_ARGS_ENV`). The function's return value is ignored; an
exception is the rank's failure (its traceback in the log, exit code 1).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobs.api.overrides import override_value
from jobs.errors import ConfigError

PROGRAM_ARGS_ENV = "PROGRAM_ARGS_JSON"
"""Not TRAINSTACK_*: those names are the job contract's (jobs.runners.base.check_env)."""
ENTRY = (
    "import importlib, json, os; "
    "getattr(importlib.import_module({module}), {name})"
    '(**json.loads(os.environ["' + PROGRAM_ARGS_ENV + '"]))'
)
MAX_ARGS_BYTES = 64 * 1024
"""The arguments travel in the environment (and a cluster's manifest): bounded."""


def import_path(program: Any, workdir: Path) -> tuple[str, str]:
    """(module, function name) of `program` in `workdir`, or ConfigError saying why not."""
    if not inspect.isfunction(program):
        raise ConfigError(
            f"program: {program!r} is not a function; allowed: a module-level function (def) "
            "in a file under the workdir",
            key="program",
        )
    name = program.__name__
    if name == "<lambda>":
        raise ConfigError(
            "program: a lambda has no import path; allowed: a module-level function (def) in "
            "a file under the workdir",
            key="program",
        )
    if program.__qualname__ != name:
        raise ConfigError(
            f"program: {program.__qualname__} is defined inside another function or class, "
            "which no other process can import; allowed: a module-level function",
            key="program",
        )
    source = inspect.getsourcefile(program)
    root = workdir.resolve()
    path = Path(source).resolve() if source else None
    if path is None or not path.is_relative_to(root):
        raise ConfigError(
            f"program: {name} is defined in {source or 'no file'}, outside the workdir {root}; "
            "allowed: a function in a file under the workdir (workdir= or runner.workdir)",
            key="program",
        )
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(part.isidentifier() for part in parts):
        raise ConfigError(
            f"program: {path} is not importable as a module from {root}; allowed: a file "
            "whose path parts are Python identifiers",
            key="program",
        )
    return ".".join(parts), name


def program_overrides(
    program: Any, args: Mapping[str, Any] | None, workdir: str | Path | None
) -> list[str]:
    """The overrides that make `program(**args)` the job's program (quoted as data)."""
    where = Path(workdir) if workdir is not None else Path.cwd()
    module, name = import_path(program, where)
    if args is not None and not isinstance(args, Mapping):
        raise ConfigError(f"args: {args!r} is not a mapping; allowed: {{name: value}}", key="args")
    try:
        encoded = json.dumps(dict(args or {}), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"args: not JSON ({err}); allowed: JSON values", key="args") from None
    if len(encoded) > MAX_ARGS_BYTES:
        raise ConfigError(
            f"args: {len(encoded)} bytes as JSON; allowed: at most {MAX_ARGS_BYTES}", key="args"
        )
    entry = ENTRY.format(module=json.dumps(module), name=json.dumps(name))
    command = ",".join(override_value(word) for word in ("python", "-u", "-c", entry))
    return [
        "runner=command",
        f"runner.workdir={override_value(str(where.resolve()))}",
        f"runner.command=[{command}]",
        f"+runner.env.{PROGRAM_ARGS_ENV}={override_value(encoded)}",
    ]
