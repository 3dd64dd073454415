"""A request's values as Hydra override strings: the one place a value is quoted as data and a
sweep's axes become `key=v1,v2,...`. Pydantic-free, so the Python API (jobs/inprocess.py)
quotes and sweeps the same way with only the `local` extra installed."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from jobs.api.request_policy import (
    KEY,
    MAX_SWEEP_POINTS,
    REQUEST_GROUPS,
    Refused,
    _shown,
    check_number,
    check_option_name,
    check_text,
)

Scalar = str | int | float | bool | None

Labelled = list[tuple[str, str]]
"""(what a refusal names it by: the request's field, as the client wrote it; the override)."""

_ESCAPED = re.compile(r"(\\*)('|\Z)")
"""A run of backslashes before a quote or the end of the string."""


def _escape(match: re.Match) -> str:
    return match[1] * 2 + ("\\'" if match[2] else "")


def override_value(value: Scalar) -> str:
    """A value in Hydra's override grammar: strings quoted (any character survives)."""
    if isinstance(value, str):
        # Hydra reads backslashes as escapes only in a run of them before a quote or the
        # closing quote (facebookresearch/hydra v1.3.8, hydra/grammar/OverrideLexer.g4,
        # QUOTED_VALUE): only those runs are doubled; any other backslash stays as it is.
        return "'" + _ESCAPED.sub(_escape, value) + "'"
    return json.dumps(value)  # true/false/null and numbers read the same in Hydra


def labelled_axis_overrides(axes: Mapping[str, Sequence[Scalar]]) -> Labelled:
    """One `key=v1,v2,...` per axis, labelled `axes.<key>`. Raises Refused (one line naming
    the axis, or the value `axes.<key>[i]`) for a key that is not a plain dotted config key (it
    would be grammar: `=`, `,`, `+`, `~`, quotes ...), an axis with no value (the sweep would be
    0 points, as `range(1,0)` in overrides is refused), more than MAX_SWEEP_POINTS values, or a
    value too long, not finite or past int64. An axis over a config group (`model`) takes
    option names, written unquoted (`model=llama3_8b,tiny`); any other value is quoted."""
    out: Labelled = []
    for key, values in axes.items():
        if not KEY.match(key):
            raise Refused(
                f"axes: {_shown(key)} is not a config key; allowed: a dotted key "
                "(letters, digits, _ and . only, e.g. trainer.lr)"
            )
        if not values:
            raise Refused(f"axes.{key}: no value; allowed: a list of one or more values")
        if len(values) > MAX_SWEEP_POINTS:
            raise Refused(f"axes.{key}: {len(values)} values; allowed: at most {MAX_SWEEP_POINTS}")
        for index, value in enumerate(values):
            where = f"axes.{key}[{index}]"
            if key in REQUEST_GROUPS:
                check_option_name(where, value)
            elif isinstance(value, str):
                check_text(where, value)
            else:
                check_number(where, value)
        if key in REQUEST_GROUPS:
            out.append((f"axes.{key}", f"{key}={','.join(str(v) for v in values)}"))
        else:
            out.append((f"axes.{key}", f"{key}={','.join(override_value(v) for v in values)}"))
    return out


def axis_overrides(axes: Mapping[str, Sequence[Scalar]]) -> list[str]:
    """`labelled_axis_overrides` without the labels."""
    return [text for _, text in labelled_axis_overrides(axes)]
