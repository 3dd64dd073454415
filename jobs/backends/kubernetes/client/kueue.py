"""What Kueue says about a job: its Workload's reason for holding it, and the queue checks of
the preflight (the LocalQueue exists; the job fits its ClusterQueue's nominal quota at all);
and the one write trainstack makes to a Workload: `cancel` deactivates it.

trainstack never admits or un-suspends a job. Suspending a queued job is no cancel: Kueue
un-suspends any job whose Workload is admitted (kubernetes-sigs/kueue v0.19.2,
pkg/controller/jobframework/reconciler.go, "handle job is suspended"). A Workload with
`spec.active: false` is evicted with reason Deactivated (its quota released, its job
suspended: pkg/controller/core/workload_controller.go) and never admitted again.
"""

from __future__ import annotations

from catalog.kubernetes import QUEUE_LABEL
from jobs.backends.kubernetes.client.api import Cluster, ClusterError, status_of

GPU_RESOURCE = "nvidia.com/gpu"

GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def is_queued(job: dict) -> bool:
    """Kueue starts and stops the job (it has the queue label jobs.spec sets from job.queue)."""
    return bool(((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL))


def deactivate(cluster: Cluster, workload: dict) -> bool:
    """Set the Workload inactive (see the module docstring); False when it is gone or may not
    be changed (RBAC)."""
    name = workload["metadata"]["name"]
    try:
        cluster.call(
            f"deactivate Workload {cluster.namespace}/{name}",
            cluster.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            cluster.namespace,
            "workloads",
            name,
            {"spec": {"active": False}},
            expect=(403, 404),
        )
    except Exception as exc:
        if status_of(exc) in (403, 404):
            return False
        raise
    return True


def workload_of(cluster: Cluster, job: dict) -> dict | None:
    """The job's Workload; None when there is none or it may not be read (RBAC)."""
    uid = job["metadata"].get("uid")
    try:
        listing = cluster.call(
            f"list Workloads of {cluster.namespace}/{job['metadata']['name']}",
            cluster.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            cluster.namespace,
            "workloads",
            label_selector=f"{JOB_UID_LABEL}={uid}",
            expect=(403, 404),
        )
    except Exception as exc:
        if status_of(exc) in (403, 404):
            return None
        raise
    items = listing.get("items", [])
    return items[0] if items else None


def queue_reason(workload: dict | None) -> str:
    """One line: why Kueue holds the job (evicted/preempted, or waiting for quota)."""
    if workload is None:
        return "suspended (no Kueue workload: paused by an admin, or Kueue has not seen it yet)"
    true = {}
    false = {}
    for cond in (workload.get("status") or {}).get("conditions") or []:
        (true if cond.get("status") == "True" else false)[cond["type"]] = cond
    queue = (workload.get("spec") or {}).get("queueName", "?")
    for kind in ("Evicted", "Preempted"):
        if kind in true and "QuotaReserved" not in true:
            reason, message = true[kind].get("reason", kind).lower(), true[kind].get("message")
            return f"in queue {queue} after {reason}: {message or ''}".strip()
    if "QuotaReserved" in false:
        return f"waiting in queue {queue}: {false['QuotaReserved'].get('message', '')}".strip()
    if "Admitted" in true:
        return f"admitted by queue {queue}; starting"
    return f"waiting in queue {queue}"


def get_local_queue(cluster: Cluster, name: str) -> dict | None:
    return cluster.call_or_none(
        f"get LocalQueue {cluster.namespace}/{name}",
        cluster.custom.get_namespaced_custom_object,
        GROUP,
        VERSION,
        cluster.namespace,
        "localqueues",
        name,
    )


def get_cluster_queue(cluster: Cluster, name: str) -> dict | None:
    return cluster.call_or_none(
        f"get ClusterQueue {name}",
        cluster.custom.get_cluster_custom_object,
        GROUP,
        VERSION,
        "clusterqueues",
        name,
    )


def nominal_quota(cluster_queue: dict, *, gpu: bool = False) -> dict[str, float]:
    """Total nominal quota per resource over every flavor of every resource group; with `gpu`,
    over the flavors that hold GPUs only (a GPU pod set never fits the stack's `system` flavor,
    so its CPU and memory are no room for one)."""
    totals: dict[str, float] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            amounts = {
                resource["name"]: parse_quantity(str(resource.get("nominalQuota", "0")))
                for resource in flavor.get("resources") or []
            }
            if gpu and not amounts.get(GPU_RESOURCE):
                continue
            for name, amount in amounts.items():
                totals[name] = totals.get(name, 0.0) + amount
    return totals


def parse_quantity(text: str) -> float:
    from kubernetes.utils import parse_quantity as parse  # lazy: start-up (kubernetes client)

    try:
        return float(parse(text))
    except ValueError as exc:
        raise ClusterError(f"cannot read Kueue quota {text!r}") from exc
