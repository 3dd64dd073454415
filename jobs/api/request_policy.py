"""What a request may put into a job's config: an allow-list, checked before Hydra sees it.

A request names options of a few config groups and sets keys under a few prefixes; everything
else (backend, cluster, storage, stack, hydra, package overrides) is the service's. Option
names are plain names, so no request text becomes a path Hydra follows, and no request text
reaches a resolver: `${...}` anywhere in a request is refused. Each refusal is one line naming
the override; it never says whether some file exists.
"""

from __future__ import annotations

import math
import re
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, QuotedString, RangeSweep
from hydra.errors import HydraException

REQUEST_GROUPS = ("model", "data", "trainer", "runner", "compute", "experiment")
"""Config groups whose options a request may select (`model=llama3_8b`)."""
REQUEST_PREFIXES = ("model.", "data.", "trainer.", "runner.", "compute.", "job.")
"""Keys a request may set (`trainer.lr=1e-3`), besides REQUEST_KEYS."""
REQUEST_KEYS = ("run_id", "sweep_id", "seed", "storage.root")
SERVICE_ONLY_KEYS = (
    "job.image_repository",
    "job.owner",
    "runner.workdir",
    "runner.workdir_max_mb",
    "runner.code",
)
"""Under an allowed prefix, yet the service's: the stack's repository, who asked, and
runner.workdir (a directory on the service's own disk: code comes in the request's image)."""
OPTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")
"""A plain option name (catalog instance types have dots: p5.48xlarge); `..` is refused."""
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*\Z")
MAX_VALUE_CHARS = 4096
MAX_DEPTH = 16
"""How deep lists and dicts in one override value may nest (Hydra's parser recurses per level:
a few hundred `[` would exhaust Python's stack)."""
MAX_SWEEP_POINTS = 256
"""Points one API sweep may have: counted from the grammar before any point is expanded, so
`range(0,1000000000)` or 200 two-valued axes cost nothing."""
INTERPOLATION = "${"


class Refused(ValueError):
    """str() is the one line the API answers with 422."""


def allowed_text() -> str:
    return (
        f"options of {', '.join(REQUEST_GROUPS)} (plain names) and keys under "
        f"{', '.join(p + '*' for p in REQUEST_PREFIXES)}, {', '.join(REQUEST_KEYS)}"
    )


def check_text(field: str, value: str) -> None:
    """Every string of a request: bounded, and never an interpolation."""
    if len(value) > MAX_VALUE_CHARS:
        raise Refused(f"{field}: {len(value)} characters; allowed: at most {MAX_VALUE_CHARS}")
    if INTERPOLATION in value:
        raise Refused(
            f"{field}: interpolations (${{...}}) are not allowed in request values; "
            "give the literal value"
        )


def check_overrides(overrides: list[str], sweep: bool = False) -> None:
    """Raise Refused for the first override a request may not give (see the module doc)."""
    parser = OverridesParser.create()
    points = 1
    for index, text in enumerate(overrides):
        check_text(f"overrides[{index}]", text)
        try:
            override = parser.parse_override(text)
        except HydraException:
            raise Refused(f"overrides[{index}]: not a Hydra override (key=value)") from None
        except RecursionError:
            raise Refused(
                f"overrides[{index}]: values nested too deeply; allowed: at most {MAX_DEPTH} levels"
            ) from None
        key = override.key_or_group
        if override.package is not None:
            raise Refused(f"{key}@{override.package}: package overrides are not allowed")
        if override.is_sweep_override() and not sweep:
            raise Refused(f"{key}: sweeps go to POST /v1/sweeps")
        if override.is_sweep_override():
            points *= _sweep_values(key, override._value)
            if points > MAX_SWEEP_POINTS:
                raise Refused(
                    f"overrides[{index}]: the sweep would have more than {MAX_SWEEP_POINTS} "
                    f"points; allowed: at most {MAX_SWEEP_POINTS} per request"
                )
        if key in REQUEST_GROUPS:
            _check_option(key, override._value)
            continue
        if not KEY.match(key) or not _settable(key):
            raise Refused(f"{key}: not settable by a request; allowed: {allowed_text()}")
        _check_value(key, override._value)


def _sweep_values(key: str, value: Any) -> int:
    """How many values a sweep override gives, without listing them."""
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if not step or any(not math.isfinite(v) for v in (start, stop, step)):
            raise Refused(f"{key}: range() needs a finite, non-zero step")
        count = (stop - start) / step
        if count <= 0:  # no value: the sweep would be 0 points whatever the other axes say
            raise Refused(f"{key}: range() gives no value; allowed: start before stop in step")
        return math.ceil(count) if count <= MAX_SWEEP_POINTS else MAX_SWEEP_POINTS + 1
    raise Refused(f"{key}: a sweep takes a,b / choice() / range(); allowed: those")


def _settable(key: str) -> bool:
    if key in SERVICE_ONLY_KEYS or any(key.startswith(k + ".") for k in SERVICE_ONLY_KEYS):
        return False
    return key in REQUEST_KEYS or key.startswith(REQUEST_PREFIXES)


def _check_option(group: str, value: Any) -> None:
    names = value.list if isinstance(value, ChoiceSweep) else [value]
    for name in names:
        if not (isinstance(name, str) and OPTION_NAME.match(name) and ".." not in name):
            raise Refused(
                f"{group}: {_shown(name)} is not an option name; allowed: a plain name "
                "(letters, digits, . _ -; no /, @ or ..)"
            )


def _check_value(key: str, value: Any, depth: int = 0) -> None:
    """Parsed values too: quoted strings, lists, dicts and sweeps hold strings."""
    if depth > MAX_DEPTH:
        raise Refused(f"{key}: values nested too deeply; allowed: at most {MAX_DEPTH} levels")
    if isinstance(value, QuotedString):
        value = value.text
    if isinstance(value, str):
        check_text(key, value)
    elif isinstance(value, ChoiceSweep):
        for item in value.list:
            _check_value(key, item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_value(key, item, depth + 1)
    elif isinstance(value, dict):
        for k, item in value.items():
            _check_value(key, k, depth + 1)
            _check_value(key, item, depth + 1)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_request(fields: dict[str, Any], overrides: list[str], sweep: bool = False) -> None:
    """A request's own fields (named as the client sent them), then the overrides they make."""
    for name, value in fields.items():
        if isinstance(value, str):
            check_text(name, value)
        elif isinstance(value, dict):
            for key, item in value.items():
                check_text(f"{name}.{key}", str(key))
                if isinstance(item, str):
                    check_text(f"{name}.{key}", item)
    check_overrides(overrides, sweep=sweep)
