"""Names of runs and sweeps: DNS-1035 labels short enough for the operators' pod names.

Each job kind names its pods after the job in its own way (`PodNames`, one per kind in
jobs.backends.kubernetes.client.kinds). The training operator names a PyTorchJob's pods
`<job>-<replica type>-<index>` ("-master-0", "-worker-12") and services after them; Kubernetes
caps each at 63 characters. A TrainJob's JobSet (same name) names its pods
`<jobset>-node-0-<index>-<5 random chars>`, and JobSet's webhook refuses a JobSet whose longest
pod name would pass 63 (kubernetes-sigs/jobset v0.12.0, pkg/webhooks/jobset_webhook.go:
`placement.GenPodName(js.Name, rJob.Name, maxJobIndex, maxPodIndex) + "-abcde"` must be a
DNS-1035 label), so its limit depends on the node count: 48 characters up to 10 nodes, 47 up
to 100.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
DNS_LABEL_MAX = 63
POD_SUFFIX = "-abcde"
"""The random suffix Kubernetes adds to an indexed Job's pod name, as JobSet's webhook counts it."""


@dataclass(frozen=True)
class PodNames:
    """How a job kind names its pods after its job, `<job><infix><index><suffix>`, each a
    DNS-1035 label: the longest run id that allows. Each job kind has one
    (jobs.backends.kubernetes.client.kinds.JobKind.pod_names)."""

    infix: str
    suffix: str = ""
    index_digits: int | None = None
    """Room kept for the index whatever the node count; None: the job's own last node index,
    so the limit depends on its node count."""
    what: str = ""
    """The job, for a message whose limit depends on the node count ("a TrainJob")."""
    who: str = ""
    """What adds to the name, for that message ("JobSet's pod names")."""

    def max_run_id_len(self, nodes: int = 1) -> int:
        index = "9" * self.index_digits if self.index_digits else str(max(nodes, 1) - 1)
        return DNS_LABEL_MAX - len(self.infix) - len(index) - len(self.suffix)

    @property
    def per_node_count(self) -> bool:
        return self.index_digits is None

    def why(self, nodes: int = 1) -> str:
        if not self.per_node_count:
            return f"pod names add '{self.infix}<i>'"
        count = max(nodes, 1)
        return (
            f"for {self.what} of {count} node(s): {self.who} add "
            f"'{self.infix}{count - 1}{self.suffix}' and must fit in {DNS_LABEL_MAX}"
        )


OPERATOR_PODS = PodNames("-worker-", index_digits=4)
"""The training operator's pod names, `<job>-<replica type>-<index>` ("-master-0",
"-worker-12"), with room for up to 9,999 workers; the rule for a name no job kind is known for."""
MAX_RUN_ID_LEN = OPERATOR_PODS.max_run_id_len()


def max_run_id_len(pods: PodNames = OPERATOR_PODS, nodes: int = 1) -> int:
    """The longest run id a job of `nodes` nodes whose pods are named so (`pods`) may have."""
    return pods.max_run_id_len(nodes)


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


def run_id_problem(run_id: str, pods: PodNames = OPERATOR_PODS, nodes: int = 1) -> str | None:
    """Why `run_id` can't name a job of `nodes` nodes whose pods are named so (`pods`: its
    kind's), or None when it can."""
    return _name_problem(run_id, pods.max_run_id_len(nodes), pods.why(nodes))


def sweep_id_problem(sweep_id: str, pods: PodNames = OPERATOR_PODS, nodes: int = 1) -> str | None:
    """Why `sweep_id` can't name a sweep, or None when it can: its points' run ids are
    `<sweep_id>-<point>`, so it is checked as itself, never through a run id it made."""
    limit = pods.max_run_id_len(nodes) - len("-9999")
    why = "point run ids add '-<point>'"
    if pods.per_node_count:
        why += f" and {pods.why(nodes).removeprefix('for ')}"
    return _name_problem(sweep_id, limit, why)
