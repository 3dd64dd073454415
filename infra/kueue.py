"""Kueue: all-or-nothing admission of training jobs, fair sharing of the GPU node groups, and
priorities.

Installed from its pinned Helm chart. One ResourceFlavor per GPU node group (Kueue injects
the flavor's node label into admitted pods, so they land on that group) and, last, the
`system` flavor of the system nodes; one ClusterQueue whose nominal quota per GPU flavor is
what the group's nodes hold at `maxSize` (GPUs, EFA interfaces, CPU, memory and the 2 MiB huge
pages EFA jobs request, from the catalog) and whose `system` flavor holds
`trainstack:kueue.systemQuota` of CPU and memory and nothing else.

Where a pod set lands: Kueue tries a resource group's flavors in order for each pod set, and a
flavor whose `nodeTaints` the pod set does not tolerate is skipped (its own `tolerations`
count; kubernetes-sigs/kueue v0.19.2, pkg/scheduler/flavorassigner/flavorassigner.go,
`checkFlavorForPodSets`). The GPU flavors carry the GPU nodes' taint and no toleration, so only
pods that tolerate it themselves (every GPU pod trainstack writes) may take GPU quota; a pod
set without it (a RayJob's head and submitter, the CPU runtime) gets `system`, whose GPU
quota is 0, so a GPU pod set never fits there. A RayJob's head therefore waits for system
quota rather than taking a GPU node's. One LocalQueue in the
training namespace (what `job.queue` names) and the WorkloadPriorityClasses `job.priority`
picks from. Jobs are created suspended and only Kueue un-suspends them. Kueue's integrations
name the installed operator's kind (TrainJob or PyTorchJob) and, where the stack installs
KubeRay, RayJob, so it manages those jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s
import yaml

from catalog.pods import HUGEPAGES_2MI
from infra.cluster import SYSTEM_NODE_LABELS
from infra.cluster_addons import helm_release
from infra.gpu_nodes import GPU_TAINT, GROUP_LABEL
from infra.settings.types import SYSTEM_FLAVOR, GpuNodeGroupConfig, KueueConfig
from infra.settings.versions import KUEUE

# What each EFA node reserves (infra/launch_template.py), so the quota is what the nodes hold.
_HUGEPAGES_MI = int(HUGEPAGES_2MI.removesuffix("Mi"))

KUEUE_CHART = KUEUE
KUEUE_VERSION = KUEUE["version"]
API_VERSION = "kueue.x-k8s.io/v1beta1"
KUEUE_NAMESPACE = "kueue-system"
COVERED_RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi")
"""Every resource a training pod requests: Kueue refuses a workload asking for one that no
flavor covers."""


def flavor_quota(group: GpuNodeGroupConfig) -> dict[str, str]:
    """What the group's nodes hold at maxSize, per covered resource."""
    nodes, instance = group.max_size, group.instance
    efa = instance.efa_interfaces if instance.has_efa else 0
    return {
        "cpu": str(instance.vcpus * nodes),
        "memory": canonical_binary(instance.memory_gib * nodes, "Gi"),
        "nvidia.com/gpu": str(instance.gpus * nodes),
        "vpc.amazonaws.com/efa": str(efa * nodes),
        "hugepages-2Mi": canonical_binary(_HUGEPAGES_MI * nodes if efa else 0, "Mi"),
    }


_BINARY_UNITS = ("Mi", "Gi", "Ti", "Pi")


def canonical_binary(value: int, unit: str) -> str:
    """`value` `unit` as the API server stores it: the largest binary suffix that divides it,
    "0" for nothing. Written otherwise ("4096Gi" for 4Ti), the stored object differs from the
    program's and every `pulumi preview` after `up` shows an update (seen on the real engine
    against the local cluster: the ClusterQueue's 4096Gi and 10240Mi)."""
    if value == 0:
        return "0"
    index = _BINARY_UNITS.index(unit)
    while value % 1024 == 0 and index + 1 < len(_BINARY_UNITS):
        value, index = value // 1024, index + 1
    return f"{value}{_BINARY_UNITS[index]}"


def system_quota(config: KueueConfig) -> dict[str, str]:
    """The `system` flavor's quota: CPU and memory; no GPU, EFA interface or huge page."""
    return {
        "cpu": str(config.system_cpu),
        "memory": canonical_binary(config.system_memory_gib, "Gi"),
        "nvidia.com/gpu": "0",
        "vpc.amazonaws.com/efa": "0",
        "hugepages-2Mi": "0",
    }


def cluster_queue_spec(groups: tuple[GpuNodeGroupConfig, ...], config: KueueConfig) -> dict:
    """Pure: the ClusterQueue's spec: the GPU flavors in the groups' order, then `system`
    (every flavor lists every covered resource, in order). Lower priorities are preempted
    inside the queue."""
    quotas = [(group.name, flavor_quota(group)) for group in groups]
    quotas.append((SYSTEM_FLAVOR, system_quota(config)))
    flavors = [
        {
            "name": name,
            "resources": [
                {"name": resource, "nominalQuota": amount} for resource, amount in quota.items()
            ],
        }
        for name, quota in quotas
    ]
    return {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES), "flavors": flavors}],
    }


INTEGRATIONS = {
    "trainjob": "trainer.kubeflow.org/trainjob",
    "pytorchjob": "kubeflow.org/pytorchjob",
    "rayjob": "ray.io/rayjob",
}
"""Kueue's framework name for each job kind (`job.api`) the stack may install: the training
operator's, and KubeRay's RayJob (kubernetes-sigs/kueue v0.19.2,
pkg/controller/jobs/rayjob/rayjob_controller.go, FrameworkName)."""


def frameworks(training_operator: str, *, ray_jobs: bool = True) -> list[str]:
    """Kueue's integrations: batch Jobs (data prepare), the training operator's kind, and
    RayJobs when the stack installs KubeRay (`trainstack:rayJobs`)."""
    kinds = [training_operator, *(["rayjob"] if ray_jobs else [])]
    return ["batch/job", *(INTEGRATIONS[kind] for kind in kinds)]


def manager_config(training_operator: str, *, ray_jobs: bool = True) -> dict:
    """Kueue's Configuration (the chart's `managerConfig.controllerManagerConfigYaml`): the
    chart's defaults, with the integrations trainstack submits (batch Jobs for data prepare,
    the installed operator's training jobs and, with `ray_jobs`, RayJobs) stated rather than
    inherited."""
    return {
        # The pinned chart's own default is v1beta2 (kubernetes-sigs/kueue v0.19.2,
        # charts/kueue/values.yaml); the keys below are the same in both.
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": frameworks(training_operator, ray_jobs=ray_jobs)},
    }


def kueue_values(training_operator: str, *, ray_jobs: bool = True) -> dict:
    config = yaml.safe_dump(manager_config(training_operator, ray_jobs=ray_jobs), sort_keys=False)
    return {"managerConfig": {"controllerManagerConfigYaml": config}}


GPU_NODE_TAINT = {"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NoSchedule"}
"""The GPU nodes' taint as Kubernetes writes it (infra/gpu_nodes.py's is EKS's spelling)."""


def resource_flavor_spec(group_name: str) -> dict:
    """Pure: a GPU node group's ResourceFlavor: Kueue puts its label on the pods it admits
    there, and admits there only pod sets that tolerate the GPU taint themselves."""
    return {"nodeLabels": {GROUP_LABEL: group_name}, "nodeTaints": [dict(GPU_NODE_TAINT)]}


def system_flavor_spec() -> dict:
    """Pure: the system nodes' ResourceFlavor: their label, no taint."""
    return {"nodeLabels": dict(SYSTEM_NODE_LABELS)}


def resource_flavors(groups: tuple[GpuNodeGroupConfig, ...]) -> list[tuple[str, dict]]:
    """(name, spec) of every ResourceFlavor the ClusterQueue names."""
    return [(g.name, resource_flavor_spec(g.name)) for g in groups] + [
        (SYSTEM_FLAVOR, system_flavor_spec())
    ]


def priority_class(name: str, value: int) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": f"trainstack job.priority={name}",
    }


class Kueue(pulumi.ComponentResource):
    local_queue: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        config: KueueConfig,
        groups: tuple[GpuNodeGroupConfig, ...],
        namespace: pulumi.Input[str],
        k8s_provider: k8s.Provider,
        training_operator: str,
        operators: Sequence[pulumi.Resource] = (),
        *,
        ray_jobs: bool = True,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`operators`: the installs of the job kinds it integrates (the training operator's,
        KubeRay's with `ray_jobs`); Kueue starts after them, so those kinds are served when it
        looks."""
        super().__init__("trainstack:infra:Kueue", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=k8s_provider)
        release = helm_release(
            name,
            KUEUE_CHART,
            KUEUE_NAMESPACE,
            kueue_values(training_operator, ray_jobs=ray_jobs),
            pulumi.ResourceOptions.merge(
                in_cluster, pulumi.ResourceOptions(depends_on=list(operators))
            ),
            create_namespace=True,
        )
        after_crds = pulumi.ResourceOptions.merge(
            in_cluster, pulumi.ResourceOptions(depends_on=[release])
        )
        flavors = [
            k8s.apiextensions.CustomResource(
                f"{name}-flavor-{flavor}",
                api_version=API_VERSION,
                kind="ResourceFlavor",
                metadata={"name": flavor},
                spec=spec,
                opts=after_crds,
            )
            for flavor, spec in resource_flavors(groups)
        ]
        cluster_queue = k8s.apiextensions.CustomResource(
            f"{name}-cluster-queue",
            api_version=API_VERSION,
            kind="ClusterQueue",
            metadata={"name": config.cluster_queue},
            spec=cluster_queue_spec(groups, config),
            opts=pulumi.ResourceOptions.merge(
                after_crds, pulumi.ResourceOptions(depends_on=[release, *flavors])
            ),
        )
        local_queue = k8s.apiextensions.CustomResource(
            f"{name}-local-queue",
            api_version=API_VERSION,
            kind="LocalQueue",
            metadata={"name": config.local_queue, "namespace": namespace},
            spec={"clusterQueue": config.cluster_queue},
            opts=pulumi.ResourceOptions.merge(
                after_crds, pulumi.ResourceOptions(depends_on=[cluster_queue])
            ),
        )
        # Top-level `value`: not a spec, so not a CustomResource; the provider applies these.
        k8s.yaml.v2.ConfigGroup(
            f"{name}-priorities",
            objs=[priority_class(priority, value) for priority, value in config.priority_classes],
            opts=after_crds,
        )
        self.local_queue = local_queue.metadata["name"]
        self.register_outputs({"local_queue": self.local_queue})
