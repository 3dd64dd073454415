"""Checks before a submit, each failure one line naming the config key to change.

The job kind's CRD must be served (and, for a TrainJob, the ClusterTrainingRuntime it names
must exist); the namespace and service account must exist;
and the requested nodes must fit: enough schedulable nodes of the instance type with the
catalog's GPUs and EFA interfaces allocatable, or a node group of that type whose max size
lets the autoscaler add them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.backends.kubernetes.client.api import Cluster, ClusterError, status_of
from jobs.backends.kubernetes.client.kinds import (
    KINDS,
    PYTORCHJOB,
    RUNTIME_PLURAL,
    TRAINJOB,
    JobKind,
)
from jobs.backends.kubernetes.client.kueue import (
    GPU_RESOURCE,
    get_cluster_queue,
    get_local_queue,
    nominal_quota,
)
from jobs.backends.kubernetes.client.ownership import labels_of
from jobs.backends.kubernetes.pod_facts import RUNTIME_LABELS

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
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
    queue: str | None = None
    """job.queue: the Kueue LocalQueue the job waits in (None: no Kueue)."""
    cpu_per_node: float = 0
    memory_per_node: float = 0
    """Bytes."""
    kind: JobKind = field(default=PYTORCHJOB)
    runtime: str | None = None
    """A TrainJob's ClusterTrainingRuntime (job.runtime, or the node group's)."""


TOLERATED_TAINTS = {("nvidia.com/gpu", "NoSchedule")}
"""What the rendered pods tolerate (jobs/backends/kubernetes/manifests.py)."""


def preflight(cluster: Cluster, request: PreflightRequest) -> list[str]:
    """Raise PreflightError listing every failed check; else return warnings (one line each:
    checks this submitter may not run, a job that will wait for busy nodes)."""
    namespace = cluster.namespace
    warnings: list[str] = []

    def cluster_scoped(check, what: str) -> str | None:
        # Namespace-only RBAC (normal on shared clusters) may not read cluster-scoped objects.
        try:
            return check()
        except ClusterError as err:
            if status_of(err.__cause__) != 403:
                raise
            warnings.append(f"{err} (no permission: {what} check skipped)")
            return None

    def crd() -> str | None:
        return cluster_scoped(lambda: _check_crd(cluster, request.kind), "CRD")

    def runtime() -> str | None:
        kind = request.kind
        if not kind.on_runtime or _check_crd(cluster, kind) or not request.runtime:
            return None  # a missing CRD is already the problem
        return cluster_scoped(lambda: _check_runtime(cluster, request.runtime), "runtime")

    checks = (
        crd,
        runtime,
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
        lambda: _check_capacity(cluster, request, warnings),
        lambda: _check_queue(cluster, request, warnings),
    )
    problems = [problem for problem in map(_forbidden_as_problem, checks) if problem]
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise PreflightError(
            f"preflight failed ({len(problems)} problem(s); --skip-preflight bypasses):\n{lines}"
        )
    return warnings


def _forbidden_as_problem(check) -> str | None:
    """Run one check; a 403 (RBAC lets the submitter create jobs but not read nodes or CRDs,
    both cluster-scoped) becomes that check's problem line instead of ending the preflight."""
    try:
        return check()
    except ClusterError as err:
        if status_of(err.__cause__) == 403:
            return f"{err} (no permission for this check)"
        raise


def _check_crd(cluster: Cluster, kind: JobKind = PYTORCHJOB) -> str | None:
    name = kind.crd_name
    others = "|".join(other.api for other in KINDS.values() if other is not kind)
    missing = f"CRD {name} is not installed: " + (
        kind.install_hint
        or f"install {kind.operator} before submitting {kind.kind}s, or set job.api={others} "
        "if the cluster runs the other operator"
    )
    crd = cluster.call_or_none(
        f"get CRD {name}", cluster.extensions.read_custom_resource_definition, name
    )
    if crd is None:
        return missing
    crd = cluster.extensions.api_client.sanitize_for_serialization(crd)
    served = [v["name"] for v in crd["spec"].get("versions", []) if v.get("served")]
    if kind.version not in served:
        return f"CRD {name} does not serve {kind.api_version} (served: {served or 'none'})"
    conditions = (crd.get("status") or {}).get("conditions") or []
    if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
        return f"CRD {name} is not Established yet"
    return None


PART_OF = "app.kubernetes.io/part-of"


def _check_runtime(cluster: Cluster, name: str) -> str | None:
    found = cluster.call_or_none(
        f"get ClusterTrainingRuntime {name}",
        cluster.custom.get_cluster_custom_object,
        TRAINJOB.group,
        TRAINJOB.version,
        RUNTIME_PLURAL,
        name,
    )
    # Another runtime (an admin's, another team's) could carry any pod template: host paths,
    # another service account. Absent and foreign read the same, so nothing tells which exist.
    if labels_of(found).get(PART_OF) != RUNTIME_LABELS[PART_OF]:
        return (
            f"job.runtime: {name!r} is not one of trainstack's ClusterTrainingRuntimes (the "
            "stack installs trainstack-<node group> for each GPU node group, labelled "
            f"{PART_OF}={RUNTIME_LABELS[PART_OF]}); check cluster.node_groups, or set job.runtime"
        )
    return None


def _check_exists(cluster: Cluster, message: str, read, *args) -> str | None:
    found = cluster.call_or_none(message.split(" (")[0], read, *args)
    return message if found is None else None


def _check_capacity(cluster: Cluster, request: PreflightRequest, warnings: list[str]) -> str | None:
    if request.instance_type is None:
        return None
    listing = cluster.call(
        f"list nodes of type {request.instance_type}",
        cluster.core.list_node,
        label_selector=f"{INSTANCE_TYPE_LABEL}={request.instance_type}",
    )
    nodes = cluster.core.api_client.sanitize_for_serialization(listing).get("items", [])
    used = _requested_per_node(cluster, warnings)
    fitting = [node for node in nodes if _fits(node, request)]
    free = [node for node in fitting if _fits(node, request, used.get(_name(node), {}))]
    if len(free) >= request.nodes:
        return None
    if len(fitting) >= request.nodes:
        warnings.append(
            f"only {len(free)} of the {len(fitting)} {request.instance_type} node(s) that fit "
            "the job have its GPUs free now: it waits until others finish"
        )
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


def _name(node: dict) -> str:
    return node["metadata"]["name"]


def _fits(node: dict, request: PreflightRequest, used: dict[str, int] | None = None) -> bool:
    """Ready, schedulable, no taint the pods don't tolerate, and the GPUs and EFA interfaces
    (less what running pods `used`) allocatable."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable"):
        return False
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    blocking = [
        t
        for t in spec.get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and (t.get("key"), t.get("effect")) not in TOLERATED_TAINTS
    ]
    if not ready or blocking:
        return False
    allocatable = status.get("allocatable") or {}
    used = used or {}
    return (
        _count(allocatable.get(GPU_RESOURCE)) - used.get(GPU_RESOURCE, 0) >= request.gpus_per_node
        and _count(allocatable.get(EFA_RESOURCE)) - used.get(EFA_RESOURCE, 0)
        >= request.efa_per_node
    )


def _requested_per_node(cluster: Cluster, warnings: list[str]) -> dict[str, dict[str, int]]:
    """GPUs and EFA interfaces requested by the pods bound to each node and not finished."""
    try:
        listing = cluster.call(
            "list pods in all namespaces", cluster.core.list_pod_for_all_namespaces, expect=(403,)
        )
    except Exception as exc:
        if status_of(exc) != 403:
            raise
        warnings.append("no permission to list pods cluster-wide: free GPUs not checked")
        return {}
    pods = cluster.core.api_client.sanitize_for_serialization(listing).get("items", [])
    used: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            for resource in (GPU_RESOURCE, EFA_RESOURCE):
                amount = _count(requests.get(resource))
                used.setdefault(node, {}).setdefault(resource, 0)
                used[node][resource] += amount
    return used


def _check_queue(cluster: Cluster, request: PreflightRequest, warnings: list[str]) -> str | None:
    """The LocalQueue exists; the job fits its ClusterQueue's nominal quota at all (else
    Kueue would hold it forever)."""

    if request.queue is None:
        return None
    local = get_local_queue(cluster, request.queue)
    if local is None:
        return (
            f"job.queue: LocalQueue {request.queue!r} does not exist in namespace "
            f"{cluster.namespace!r} (the stack's is in job.queue of your stack/<stack>.yaml)"
        )
    name = (local.get("spec") or {}).get("clusterQueue", "")
    try:
        cluster_queue = get_cluster_queue(cluster, name)
    except ClusterError as err:
        if status_of(err.__cause__) != 403:
            raise
        warnings.append(f"{err} (no permission: quota check skipped)")
        return None
    if cluster_queue is None:
        return f"job.queue: LocalQueue {request.queue!r} points at missing ClusterQueue {name!r}"
    quota = nominal_quota(cluster_queue, gpu=request.gpus_per_node > 0)
    need = {
        GPU_RESOURCE: request.gpus_per_node,
        EFA_RESOURCE: request.efa_per_node,
        "cpu": request.cpu_per_node,
        "memory": request.memory_per_node,
    }
    for resource, per_node in need.items():
        total = per_node * request.nodes
        if total and total > quota.get(resource, 0):
            return (
                f"compute.nodes={request.nodes} needs {total:g} {resource} in all; ClusterQueue "
                f"{name!r} (job.queue={request.queue}) has a nominal quota of "
                f"{quota.get(resource, 0):g}: it could never be admitted"
            )
    return None


def _count(quantity: str | None) -> int:
    try:
        return int(quantity or 0)
    except ValueError:
        return 0
