"""The admission rules a RayJob meets before anything is written: Kueue's RayJob webhook and
KubeRay's own validation, restated (a schema can't express them; the API server would take the
object and the refusal would come only as an event, or as a job that never starts).

Kueue (kubernetes-sigs/kueue v0.19.2):
- pkg/controller/jobs/rayjob/rayjob_webhook.go `validateCreate`, for a queued RayJob: a
  `clusterSelector` (an existing cluster) together with `rayClusterSpec` is refused; without
  either, `rayClusterSpec` is required; `shutdownAfterJobFinishes` must be true ("should delete
  the cluster after finishing", else it keeps holding the queue's quota).
- pkg/controller/jobs/raycluster/common.go `ValidateCreate`: `enableInTreeAutoscaling` only
  with workload slicing (elastic jobs, which trainstack does not make); at most
  `jobframework.MaxPodSets` (18, pkg/controller/jobframework/constants.go) pod sets, counted
  as the worker groups plus the head: more than 17 worker groups; no worker group named `head`
  (reserved for the head's pod set).
- pkg/controller/jobs/rayjob/rayjob_controller.go `PodSets`/`expectedPodSetsCount`: in
  K8sJobMode the submitter is one more pod set of the same Workload, so with it the Workload's
  18 allow 16 worker groups (checked here; the webhook's count leaves the submitter out).

KubeRay (ray-project/kuberay ray-operator/v1.6.2, ray-operator/controllers/ray/utils/
validation.go `ValidateRayJobSpec`): a suspended RayJob needs `shutdownAfterJobFinishes`;
`backoffLimit` is refused in InteractiveMode; the name (47 characters, DNS-1035) is
`client.kinds.RAYJOB.pod_names`, checked with every kind's name.

Pure: returns the first problem as (key, what is allowed), or None.
"""

from __future__ import annotations

MAX_POD_SETS = 18
"""kubernetes-sigs/kueue v0.19.2, pkg/controller/jobframework/constants.go `MaxPodSets`."""
HEAD_POD_SET = "head"
"""kubernetes-sigs/kueue v0.19.2, pkg/controller/jobs/raycluster/raycluster_controller.go
`headGroupPodSetName`."""


def rayjob_problem(job: dict) -> tuple[str, str] | None:
    """The first rule of Kueue's or KubeRay's that `job` breaks, as (key, allowed)."""
    spec = job.get("spec") or {}
    cluster = spec.get("rayClusterSpec")
    if spec.get("clusterSelector"):
        if cluster is not None:
            return "spec.clusterSelector", "a Kueue-managed RayJob brings its own cluster"
        return "spec.clusterSelector", "trainstack runs each job on a cluster of its own"
    if cluster is None:
        return "spec.rayClusterSpec", "required (Kueue admits the cluster with the job)"
    if spec.get("shutdownAfterJobFinishes") is not True:
        return (
            "spec.shutdownAfterJobFinishes",
            "must be true: Kueue refuses a RayJob whose cluster outlives it",
        )
    if cluster.get("enableInTreeAutoscaling"):
        return (
            "spec.rayClusterSpec.enableInTreeAutoscaling",
            "must be false: Kueue admits autoscaling only for elastic (sliced) workloads",
        )
    groups = cluster.get("workerGroupSpecs") or []
    if len(groups) + 1 > MAX_POD_SETS:
        return (
            "spec.rayClusterSpec.workerGroupSpecs",
            f"{len(groups)} groups; at most {MAX_POD_SETS - 1} (Kueue's {MAX_POD_SETS} pod "
            "sets, one of them the head's)",
        )
    submitter = spec.get("submissionMode", "K8sJobMode") == "K8sJobMode"
    if submitter and len(groups) + 2 > MAX_POD_SETS:
        return (
            "spec.rayClusterSpec.workerGroupSpecs",
            f"{len(groups)} groups; at most {MAX_POD_SETS - 2} in K8sJobMode (the head and "
            "the submitter are pod sets of the same Workload)",
        )
    for index, group in enumerate(groups):
        if group.get("groupName") == HEAD_POD_SET:
            return (
                f"spec.rayClusterSpec.workerGroupSpecs[{index}].groupName",
                f"{HEAD_POD_SET!r} is reserved for the head group (Kueue's pod set names)",
            )
        replicas = group.get("replicas")
        bounds = (group.get("minReplicas"), group.get("maxReplicas"))
        if replicas is not None and any(b is not None and b != replicas for b in bounds):
            return (
                f"spec.rayClusterSpec.workerGroupSpecs[{index}]",
                "minReplicas and maxReplicas equal to replicas (a fixed gang, no autoscaler)",
            )
    if spec.get("submissionMode") == "InteractiveMode" and spec.get("backoffLimit"):
        return "spec.backoffLimit", "0 in InteractiveMode (KubeRay's validation)"
    return None
