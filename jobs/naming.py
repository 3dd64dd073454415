"""Names of runs and sweeps: DNS-1035 labels short enough for the operator's pod names.

The training operator names pods `<job>-<replica type>-<index>` ("-master-0", "-worker-12")
and services after them; Kubernetes caps each at 63 characters.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
MAX_RUN_ID_LEN = 63 - len("-worker-") - 4
"""Leaves room for the longest pod suffix with up to 9,999 workers."""


def slug(text: str) -> str:
    """`text` lower-cased with every run of other characters turned into one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def new_run_id(model_name: str, now: datetime, token: str | None = None) -> str:
    """<model>-<yyyymmdd-hhmmss>-<4 hex>, e.g. `llama3-8b-20261122-004500-3fa2`."""
    token = token or secrets.token_hex(2)
    name = slug(model_name)[:24].strip("-") or "run"
    name = name if name[0].isalpha() else f"m-{name}"  # DNS-1035: a letter first
    return f"{name}-{now:%Y%m%d-%H%M%S}-{token}"


def new_sweep_id(now: datetime, token: str | None = None) -> str:
    token = token or secrets.token_hex(2)
    return f"sweep-{now:%Y%m%d-%H%M%S}-{token}"


def sweep_point_run_id(sweep_id: str, index: int) -> str:
    """Stable per point, so re-running a sweep addresses the same runs."""
    return f"{sweep_id}-{index}"


MAX_SWEEP_ID_LEN = MAX_RUN_ID_LEN - len("-9999")
"""Leaves room for the point suffix of up to 10,000 points (`<sweep_id>-<point>`)."""


def _name_problem(name: str, max_len: int, why: str) -> str | None:
    if len(name) > max_len:
        return f"at most {max_len} characters ({why})"
    if not DNS1035.match(name):
        return "lower-case letters, digits and '-', starting with a letter (DNS-1035)"
    return None


def run_id_problem(run_id: str) -> str | None:
    """Why `run_id` can't name a job, or None when it can."""
    return _name_problem(run_id, MAX_RUN_ID_LEN, "pod names add '-worker-<i>'")


def sweep_id_problem(sweep_id: str) -> str | None:
    """Why `sweep_id` can't name a sweep, or None when it can: its points' run ids are
    `<sweep_id>-<point>`, so it is checked as itself, never through a run id it made."""
    return _name_problem(sweep_id, MAX_SWEEP_ID_LEN, "point run ids add '-<point>'")
