"""Names of runs and sweeps: DNS-1035 labels short enough for the operators' pod names.

The training operator names a PyTorchJob's pods `<job>-<replica type>-<index>` ("-master-0",
"-worker-12") and services after them; Kubernetes caps each at 63 characters. A TrainJob's
JobSet (same name) names its pods `<jobset>-node-0-<index>-<5 random chars>`, and JobSet's
webhook refuses a JobSet whose longest pod name would pass 63 (kubernetes-sigs/jobset v0.12.0,
pkg/webhooks/jobset_webhook.go: `placement.GenPodName(js.Name, rJob.Name, maxJobIndex,
maxPodIndex) + "-abcde"` must be a DNS-1035 label), so its limit depends on the node count:
48 characters up to 10 nodes, 47 up to 100.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
DNS_LABEL_MAX = 63
MAX_RUN_ID_LEN = DNS_LABEL_MAX - len("-worker-") - 4
"""Leaves room for the longest pod suffix with up to 9,999 workers (a PyTorchJob's)."""
TRAINJOB_POD_INFIX = "-node-0-"
"""`-<replicated job>-<job index>-` of a TrainJob's pods: Trainer's one replicated job `node`
(jobs.backends.kubernetes.runtimes.NODE), one replica (index 0)."""
POD_SUFFIX = "-abcde"
"""The random suffix Kubernetes adds to an indexed Job's pod name, as JobSet's webhook counts it."""


def max_run_id_len(api: str | None = None, nodes: int = 1) -> int:
    """The longest run id a job of `nodes` nodes on `api` may have: a TrainJob's limit from its
    longest pod name (node index `nodes - 1`), anything else the PyTorchJob's."""
    if api != "trainjob":
        return MAX_RUN_ID_LEN
    index = str(max(nodes, 1) - 1)
    return DNS_LABEL_MAX - len(TRAINJOB_POD_INFIX) - len(index) - len(POD_SUFFIX)


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


def _why(api: str | None, nodes: int) -> str:
    if api != "trainjob":
        return "pod names add '-worker-<i>'"
    return (
        f"for a TrainJob of {max(nodes, 1)} node(s): JobSet's pod names add "
        f"'{TRAINJOB_POD_INFIX}{max(nodes, 1) - 1}{POD_SUFFIX}' and must fit in {DNS_LABEL_MAX}"
    )


def run_id_problem(run_id: str, api: str | None = None, nodes: int = 1) -> str | None:
    """Why `run_id` can't name a job of `nodes` nodes on `api`, or None when it can."""
    return _name_problem(run_id, max_run_id_len(api, nodes), _why(api, nodes))


def sweep_id_problem(sweep_id: str, api: str | None = None, nodes: int = 1) -> str | None:
    """Why `sweep_id` can't name a sweep, or None when it can: its points' run ids are
    `<sweep_id>-<point>`, so it is checked as itself, never through a run id it made."""
    limit = max_run_id_len(api, nodes) - len("-9999")
    why = "point run ids add '-<point>'"
    if api == "trainjob":
        why += f" and {_why(api, nodes).removeprefix('for ')}"
    return _name_problem(sweep_id, limit, why)
