"""What runs inside the cluster for trainstack: the Kubernetes provider, NVIDIA and EFA device
plugins (Helm), the Kubeflow training operator v1 (`trainstack:trainingOperator: pytorchjob`;
Kubeflow Trainer v2 is infra/kubeflow_trainer.py), and the training namespace.

The training operator comes from its release's kustomize overlay, pinned by tag, through the
provider-side `kustomize.v2.Directory` component: the provider fetches and renders it during
`pulumi up`/`preview`; the program itself never downloads anything (so tests under mocks stay
offline). Helm charts are `helm.v3.Release` resources, also resolved by the provider.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.gpu_nodes import EFA_LABEL, GPU_LABEL, GPU_TAINT
from infra.settings.versions import (
    EFA_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    TRAINING_OPERATOR_OVERLAY,
)
from infra.training_operator import init_container_configmap, operator_deployment_patch

POD_SECURITY_LABELS = {
    # Training pods run as the image's non-root uid with every capability dropped, no
    # privilege escalation and the runtime's seccomp profile
    # (jobs/backends/kubernetes/manifests.py): the
    # namespace refuses any pod that is less locked down.
    f"pod-security.kubernetes.io/{mode}": "restricted"
    for mode in ("enforce", "audit", "warn")
}
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


DEFAULT_DENY_POLICY = "default-deny-ingress"
DEFAULT_DENY_SPEC = {"podSelector": {}, "policyTypes": ["Ingress"]}
"""The training namespace's default: no pod accepts a connection unless a policy says so."""


def only_on(label: str) -> dict:
    """Node affinity requiring `label=true` (replaces the charts' own default affinity)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}]}
                ]
            }
        }
    }


def nvidia_plugin_values() -> dict:
    """The NVIDIA chart's daemonset template reads `affinity` (replacing its default)."""
    return {"tolerations": [GPU_TOLERATION], "affinity": only_on(GPU_LABEL)}


def efa_plugin_values() -> dict:
    """The EFA chart has no `affinity` value: its template builds the node affinity from
    `supportedInstanceLabels` (by default a list of instance types), so the EFA label goes
    there and the plugin runs exactly on the nodes our launch templates gave EFA."""
    return {
        "tolerations": [GPU_TOLERATION],
        "supportedInstanceLabels": {"keys": [EFA_LABEL], "values": ["true"]},
    }


def helm_release(
    name: str,
    chart: dict,
    namespace: str,
    values: pulumi.Input[dict] | None,
    opts: pulumi.ResourceOptions,
    create_namespace: bool | None = None,
    skip_crds: bool | None = None,
) -> k8s.helm.v3.Release:
    """One pinned chart from `infra.settings.versions`, released under the chart's own name.
    `skip_crds`: leave the chart's `crds/` out (the caller applies them, server-side)."""
    return k8s.helm.v3.Release(
        f"{name}-{chart['chart']}",
        name=chart["chart"],
        chart=chart["chart"],
        version=chart["version"],
        repository_opts={"repo": chart["repo"]},
        namespace=namespace,
        create_namespace=create_namespace,
        skip_crds=skip_crds,
        values=values,
        opts=opts,
    )


class ClusterAddons(pulumi.ComponentResource):
    provider: k8s.Provider
    namespace: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        kubeconfig: pulumi.Input[str],
        namespace: str,
        depends_on: list[pulumi.Resource],
        training_operator: str,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:ClusterAddons", name, None, opts)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )
        in_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)

        training_ns = k8s.core.v1.Namespace(
            f"{name}-training",
            metadata={"name": namespace, "labels": POD_SECURITY_LABELS},
            opts=in_cluster,
        )
        # No pod in the namespace accepts a connection unless a policy says so: each run brings
        # one for its own pods (jobs/backends/kubernetes/network_policy.py), the Training API one
        # for its port.
        k8s.networking.v1.NetworkPolicy(
            f"{name}-training-default-deny",
            metadata={"name": DEFAULT_DENY_POLICY, "namespace": training_ns.metadata.name},
            spec=DEFAULT_DENY_SPEC,
            opts=in_cluster,
        )
        helm_release(name, NVIDIA_DEVICE_PLUGIN, "kube-system", nvidia_plugin_values(), in_cluster)
        helm_release(name, EFA_DEVICE_PLUGIN, "kube-system", efa_plugin_values(), in_cluster)
        if training_operator == "pytorchjob":  # else Kubeflow Trainer (infra/kubeflow_trainer.py)
            operator = k8s.kustomize.v2.Directory(
                f"{name}-training-operator",
                directory=TRAINING_OPERATOR_OVERLAY,
                opts=in_cluster,
            )
            # Its PyTorch init container as the training namespace admits it
            # (infra/training_operator.py): the template in a ConfigMap, the Deployment patched
            # (server-side apply) to mount it and name it.
            after_operator = pulumi.ResourceOptions.merge(
                in_cluster, pulumi.ResourceOptions(depends_on=[operator])
            )
            configmap = init_container_configmap()
            template = k8s.core.v1.ConfigMap(
                f"{name}-pytorch-init-container",
                metadata=configmap["metadata"],
                data=configmap["data"],
                opts=after_operator,
            )
            patch = operator_deployment_patch()
            k8s.apps.v1.DeploymentPatch(
                f"{name}-training-operator-init-container",
                metadata=patch["metadata"],
                spec=patch["spec"],
                opts=pulumi.ResourceOptions.merge(
                    after_operator, pulumi.ResourceOptions(depends_on=[operator, template])
                ),
            )
        self.namespace = training_ns.metadata.name
        self.register_outputs({"namespace": self.namespace})
