"""Typed access to raw Pulumi config values; every error names the full `trainstack:` key."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pulumi

NAMESPACE = "trainstack"
"""Every setting is `trainstack:<key>` in the stack file."""


class ConfigError(pulumi.RunError):
    """A bad stack setting. RunError: Pulumi prints the message alone, without a traceback."""


def fail(key: str, problem: str) -> ConfigError:
    return ConfigError(f"{key}: {problem}")


class SettingsReader:
    """Typed access to one mapping of settings; every error names the full key."""

    def __init__(self, values: Mapping[str, Any], prefix: str, allowed: tuple[str, ...]):
        self.values = values
        self.prefix = prefix
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise fail(
                self.key(unknown[0]), f"unknown setting; allowed: {', '.join(sorted(allowed))}"
            )

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def raw(self, name: str) -> Any:
        value = self.values.get(name)
        # Top-level values come from Pulumi as strings; structured ones as JSON text.
        if isinstance(value, str) and value[:1] in ("[", "{"):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise fail(self.key(name), f"not valid JSON ({exc.msg})") from None
        return value

    def get_str(self, name: str, default: str | None = None, *, required: bool = False) -> str:
        value = self.raw(name)
        if value is None or value == "":
            if required:
                raise fail(self.key(name), "required; set it with `pulumi config set`")
            return default  # type: ignore[return-value]
        if not isinstance(value, str):
            raise fail(self.key(name), f"expected a string, got {value!r}")
        return value

    def get_int(self, name: str, default: int, *, minimum: int = 0) -> int:
        value = self.raw(name)
        if value is None:
            return default
        try:
            number = int(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or str(number) != str(value).strip():
            raise fail(self.key(name), f"expected a whole number, got {value!r}")
        if number < minimum:
            raise fail(self.key(name), f"must be >= {minimum}, got {number}")
        return number

    def get_bool(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise fail(self.key(name), f"expected true or false, got {value!r}")

    def get_list(self, name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self.raw(name)
        if value is None:
            return default
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(self.key(name), f"expected a list of strings, got {value!r}")
        return tuple(value)

    def get_object(self, name: str) -> dict[str, Any] | None:
        value = self.raw(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise fail(self.key(name), f"expected an object, got {value!r}")
        return value
