"""Checks before a submit, each failure one line naming the config key to change.

The training operator's CRD must be served; the namespace and service account must exist;
and the requested nodes must fit: enough schedulable nodes of the instance type with the
catalog's GPUs and EFA interfaces allocatable, or a node group of that type whose max size
lets the autoscaler add them.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.k8s.api import CRD_NAME, GROUP, VERSION, Cluster, ClusterError, status_of

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


class PreflightError(ClusterError):
    """One or more preflight checks failed; the message has one line per failure."""


@dataclass(frozen=True)
class NodeGroup:
    name: str
    instance_type: str
    max_size: int


@dataclass(frozen=True)
class PreflightRequest:
    service_account: str
    instance_type: str | None
    """None for jobs without a GPU instance type (no node check)."""
    nodes: int
    gpus_per_node: int
    efa_per_node: int
    node_groups: tuple[NodeGroup, ...] = ()


def preflight(cluster: Cluster, request: PreflightRequest) -> None:
    """Raise PreflightError listing every failed check; return quietly when all pass."""
    namespace = cluster.namespace
    checks = (
        lambda: _check_crd(cluster),
        lambda: _check_exists(
            cluster,
            f"namespace {namespace!r} (cluster.namespace) does not exist",
            cluster.core.read_namespace,
            namespace,
        ),
        lambda: _check_exists(
            cluster,
            f"service account {request.service_account!r} (cluster.service_account) does not "
            f"exist in namespace {namespace!r}",
            cluster.core.read_namespaced_service_account,
            request.service_account,
            namespace,
        ),
        lambda: _check_capacity(cluster, request),
    )
    problems = [problem for problem in map(_forbidden_as_problem, checks) if problem]
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise PreflightError(
            f"preflight failed ({len(problems)} problem(s); --skip-preflight bypasses):\n{lines}"
        )


def _forbidden_as_problem(check) -> str | None:
    """Run one check; a 403 (RBAC lets the submitter create jobs but not read nodes or CRDs,
    both cluster-scoped) becomes that check's problem line instead of ending the preflight."""
    try:
        return check()
    except ClusterError as err:
        if status_of(err.__cause__) == 403:
            return f"{err} (no permission for this check)"
        raise


def _check_crd(cluster: Cluster) -> str | None:
    missing = (
        f"CRD {CRD_NAME} is not installed: install the Kubeflow training operator "
        "(the infra stack does) before submitting PyTorchJobs"
    )
    crd = cluster.call_or_none(
        f"get CRD {CRD_NAME}", cluster.extensions.read_custom_resource_definition, CRD_NAME
    )
    if crd is None:
        return missing
    crd = cluster.extensions.api_client.sanitize_for_serialization(crd)
    served = [v["name"] for v in crd["spec"].get("versions", []) if v.get("served")]
    if VERSION not in served:
        return f"CRD {CRD_NAME} does not serve {GROUP}/{VERSION} (served: {served or 'none'})"
    conditions = (crd.get("status") or {}).get("conditions") or []
    if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
        return f"CRD {CRD_NAME} is not Established yet"
    return None


def _check_exists(cluster: Cluster, message: str, read, *args) -> str | None:
    found = cluster.call_or_none(message.split(" (")[0], read, *args)
    return message if found is None else None


def _check_capacity(cluster: Cluster, request: PreflightRequest) -> str | None:
    if request.instance_type is None:
        return None
    listing = cluster.call(
        f"list nodes of type {request.instance_type}",
        cluster.core.list_node,
        label_selector=f"{INSTANCE_TYPE_LABEL}={request.instance_type}",
    )
    nodes = cluster.core.api_client.sanitize_for_serialization(listing).get("items", [])
    fitting = [node for node in nodes if _fits(node, request)]
    if len(fitting) >= request.nodes:
        return None
    groups = [g for g in request.node_groups if g.instance_type == request.instance_type]
    can_grow_to = sum(g.max_size for g in groups)
    if can_grow_to >= request.nodes:
        return None  # the cluster autoscaler adds the missing nodes
    need = f"{request.gpus_per_node} {GPU_RESOURCE}" + (
        f" and {request.efa_per_node} {EFA_RESOURCE}" if request.efa_per_node else ""
    )
    have = f"the cluster has {len(fitting)} such node(s) ({len(nodes)} of that type)"
    if groups:
        names = ", ".join(g.name for g in groups)
        grow = f"node group(s) {names} can grow to {can_grow_to} (cluster.node_groups[].max_size)"
    else:
        grow = f"no node group of {request.instance_type} in cluster.node_groups"
    return (
        f"compute.nodes={request.nodes} needs {request.nodes} schedulable "
        f"{request.instance_type} node(s) with {need} allocatable; {have} and {grow}"
    )


def _fits(node: dict, request: PreflightRequest) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return (
        _count(allocatable.get(GPU_RESOURCE)) >= request.gpus_per_node
        and _count(allocatable.get(EFA_RESOURCE)) >= request.efa_per_node
    )


def _count(quantity: str | None) -> int:
    try:
        return int(quantity or 0)
    except ValueError:
        return 0
