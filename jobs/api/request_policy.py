"""What a request may put into a job's config: an allow-list, checked before Hydra sees it.

A request names options of a few config groups and sets keys under a few prefixes; everything
else (backend, cluster, storage, stack, hydra, package overrides) is the service's. Option
names are plain names, so no request text becomes a path Hydra follows, and no request text
reaches a resolver: `${...}` anywhere in a request is refused. Each refusal is one line naming
the override; it never says whether some file exists.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, QuotedString, RangeSweep
from hydra.errors import HydraException

REQUEST_GROUPS = ("model", "data", "trainer", "runner", "compute", "experiment")
"""Config groups whose options a request may select (`model=llama3_8b`)."""
REQUEST_PREFIXES = ("model.", "data.", "trainer.", "runner.", "compute.", "job.", "eval.")
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
MAX_INT = 2**63 - 1
"""The largest integer a request may give (int64, as Kubernetes' fields): past it, Python's
floats (math.isfinite, OmegaConf's float fields, the plan's hours) raise OverflowError."""


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


def check_number(field: str, value: Any) -> None:
    """A request's number: finite, and an integer within int64."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise Refused(f"{field}: an integer of {len(str(abs(value)))} digits; allowed: {_INTS}")
    if isinstance(value, float) and not math.isfinite(value):
        raise Refused(f"{field}: {value!r} is not allowed; allowed: a finite number")


_INTS = f"an integer within +-{MAX_INT} (int64)"


def check_overrides(
    overrides: Sequence[str], sweep: bool = False, labels: Sequence[str] | None = None
) -> None:
    """Raise Refused for the first override a request may not give (see the module doc).
    `labels`: what each override is named as in a refusal (the request field it came from,
    `labels[i]` for `overrides[i]`); default `overrides[i]`. An axis (`axes.<key>`) was
    checked value by value where it was written (jobs.api.models), so its length as a whole
    is bounded by the body limit alone."""
    parser = OverridesParser.create()
    points = 1
    for index, text in enumerate(overrides):
        label = labels[index] if labels is not None else f"overrides[{index}]"
        if not label.startswith("axes."):
            check_text(label, text)
        try:
            override = parser.parse_override(text)
        except HydraException:
            raise Refused(f"{label}: not a Hydra override (key=value)") from None
        except RecursionError:
            raise Refused(
                f"{label}: values nested too deeply; allowed: at most {MAX_DEPTH} levels"
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
                    f"{label}: the sweep would have more than {MAX_SWEEP_POINTS} "
                    f"points; allowed: at most {MAX_SWEEP_POINTS} per request"
                )
        if key in REQUEST_GROUPS:
            _check_option(key, override._value)
            continue
        if not KEY.match(key) or not _settable(key):
            raise Refused(f"{key}: not settable by a request; allowed: {allowed_text()}")
        _check_value(key, override._value)


def _sweep_values(key: str, value: Any) -> int:
    """How many values a sweep override gives, up to MAX_SWEEP_POINTS + 1: a range() is
    counted by enumerating it as Hydra will (`RangeSweep.range()`: Python's range, or
    Decimal steps for floats, facebookresearch/hydra v1.3.8,
    hydra/core/override_parser/types.py FloatRange), never by arithmetic on floats, which
    counted `range(0.3,1.6014593607424792,1.3014593607424791)` as 1 point for 2."""
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    if isinstance(value, RangeSweep):
        bounds = (value.start, value.stop, value.step)
        for bound in bounds:
            check_number(f"{key}: range()", bound)
        if not value.step:
            raise Refused(f"{key}: range() needs a finite, non-zero step")
        count = sum(1 for _ in itertools.islice(value.range(), MAX_SWEEP_POINTS + 1))
        if not count:  # no value: the sweep would be 0 points whatever the other axes say
            raise Refused(f"{key}: range() gives no value; allowed: start before stop in step")
        return count
    raise Refused(f"{key}: a sweep takes a,b / choice() / range(); allowed: those")


def _settable(key: str) -> bool:
    if key in SERVICE_ONLY_KEYS or any(key.startswith(k + ".") for k in SERVICE_ONLY_KEYS):
        return False
    return key in REQUEST_KEYS or key.startswith(REQUEST_PREFIXES)


def _check_option(group: str, value: Any) -> None:
    names = value.list if isinstance(value, ChoiceSweep) else [value]
    for name in names:
        check_option_name(group, name)


def _check_value(key: str, value: Any, depth: int = 0) -> None:
    """Parsed values too: quoted strings, lists, dicts and sweeps hold strings."""
    if depth > MAX_DEPTH:
        raise Refused(f"{key}: values nested too deeply; allowed: at most {MAX_DEPTH} levels")
    if isinstance(value, QuotedString):
        value = value.text
    if isinstance(value, str):
        check_text(key, value)
    elif isinstance(value, int | float):
        check_number(key, value)
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


def check_request(
    fields: dict[str, Any], overrides: Sequence[tuple[str, str] | str], sweep: bool = False
) -> None:
    """A request's own fields (named as the client sent them), then the overrides they make:
    `(label, override)`, each named by the field it came from (jobs.api.models
    `labelled_overrides`), or a plain override, named `overrides[i]`."""
    for name, value in fields.items():
        if isinstance(value, str):
            check_text(name, value)
        elif isinstance(value, int | float):
            check_number(name, value)
        elif isinstance(value, dict):
            for key, item in value.items():
                check_text(f"{name}.{key}", str(key))
                if isinstance(item, str):
                    check_text(f"{name}.{key}", item)
                else:
                    check_number(f"{name}.{key}", item)
    for name in OPTION_FIELDS:
        if isinstance(fields.get(name), str):
            check_option_name(name, fields[name])
    for key in fields.get("trainer") or {}:
        if not KEY.match(f"trainer.{key}"):  # it becomes part of an override's key
            raise Refused(
                f"trainer: {_shown(key)} is not a config key; allowed: a dotted key (letters, "
                "digits, _ and . only, e.g. max_steps)"
            )
    pairs = [(f"overrides[{i}]", o) if isinstance(o, str) else o for i, o in enumerate(overrides)]
    check_overrides([o for _, o in pairs], sweep=sweep, labels=[n for n, _ in pairs])


OPTION_FIELDS = ("model", "compute")
"""A request's typed fields that name a config group's option (`model=<name>`): written
unquoted, so each is checked as a plain name, never read as grammar (`a,b`, `choice()`)."""


def check_option_name(field: str, name: Any) -> None:
    if not (isinstance(name, str) and OPTION_NAME.match(name) and ".." not in name):
        raise Refused(
            f"{field}: {_shown(name)} is not an option name; allowed: a plain name "
            "(letters, digits, . _ -; no /, @ or ..)"
        )
