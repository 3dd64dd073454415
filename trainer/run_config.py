"""Read `--config PATH [key=value ...]` into the run's `RunConfig`, as the trainer process does.

A missing file, bad YAML, an unknown key or a wrong type is one `ConfigError` line naming the
key and what is allowed; the values' own checks are `contract.plan.make_plan`'s (the launcher
runs the same ones). All of it before the process group, the run dir or any checkpoint is
touched.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from contract.config import RunConfig
from trainer.errors import ConfigError


def load_config(path: str, overrides: list[str]) -> RunConfig:
    if not Path(path).is_file():
        raise ConfigError(f"--config: no such file {path!r}")
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"override {bad[0]!r}: expected key=value, e.g. trainer.max_steps=100")
    try:
        from_file = OmegaConf.load(path)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {path!r} is not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(from_file, DictConfig):
        allowed = ", ".join(f.name for f in dataclasses.fields(RunConfig))
        raise ConfigError(f"--config: {path!r} must be a mapping with the keys {allowed}")
    from_cli = []
    for override in overrides:
        try:
            from_cli.append(OmegaConf.from_dotlist([override]))
        except yaml.YAMLError as exc:
            problem = f"value is not valid YAML: {_yaml_problem(exc)}"
            raise ConfigError(f"override {override!r}: {problem}") from None
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), from_file, *from_cli)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(_describe(exc)) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return f"{getattr(exc, 'problem', None) or exc}{where}"


def _describe(exc: OmegaConfBaseException) -> str:
    """OmegaConf's multi-line message as one line: `<full key>: <problem>[; allowed: ...]`."""
    key = getattr(exc, "full_key", None) or "config"
    problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    section = _section_of(key)
    if "not in" in problem and section is not None:
        allowed = ", ".join(f.name for f in dataclasses.fields(section))
        return f"{key}: unknown key; allowed keys here: {allowed}"
    return f"{key}: {problem}"


def _section_of(full_key: str) -> type | None:
    """The dataclass holding `full_key` (for listing the keys allowed next to it)."""
    section: type = RunConfig
    for part in full_key.split(".")[:-1]:
        field = next((f for f in dataclasses.fields(section) if f.name == part), None)
        if field is None or not dataclasses.is_dataclass(field.default_factory):  # type: ignore[arg-type]
            return None
        section = field.default_factory  # type: ignore[assignment]
    return section
