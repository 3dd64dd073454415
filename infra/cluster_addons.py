"""What runs inside the cluster for trainstack: the Kubernetes provider, NVIDIA and EFA device
plugins (Helm), the Kubeflow training operator v1, and the training namespace.

The training operator comes from its release's kustomize overlay, pinned by tag, through the
provider-side `kustomize.v2.Directory` component: the provider fetches and renders it during
`pulumi up`/`preview`; the program itself never downloads anything (so tests under mocks stay
offline). Helm charts are `helm.v3.Release` resources, also resolved by the provider.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.gpu_nodes import EFA_LABEL, GPU_LABEL, GPU_TAINT

NVIDIA_DEVICE_PLUGIN = {
    "chart": "nvidia-device-plugin",
    "version": "0.17.1",
    "repo": "https://nvidia.github.io/k8s-device-plugin",
}
EFA_DEVICE_PLUGIN = {
    "chart": "aws-efa-k8s-device-plugin",
    "version": "v0.5.7",
    "repo": "https://aws.github.io/eks-charts",
}
TRAINING_OPERATOR_VERSION = "v1.9.2"
# kustomize's remote form (repo//path?ref=tag); the provider clones it with `git`.
TRAINING_OPERATOR_OVERLAY = (
    "https://github.com/kubeflow/trainer//manifests/overlays/standalone"
    f"?ref={TRAINING_OPERATOR_VERSION}"
)
POD_SECURITY_LABELS = {
    # Training pods run as the image's non-root uid with every capability dropped, no
    # privilege escalation and the runtime's seccomp profile (jobs/manifests.py): the
    # namespace refuses any pod that is less locked down.
    f"pod-security.kubernetes.io/{mode}": "restricted"
    for mode in ("enforce", "audit", "warn")
}
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


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


def device_plugin_values(label: str) -> dict:
    return {"tolerations": [GPU_TOLERATION], "affinity": only_on(label)}


class ClusterAddons(pulumi.ComponentResource):
    provider: k8s.Provider
    namespace: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        kubeconfig: pulumi.Input[str],
        namespace: str,
        depends_on: list[pulumi.Resource],
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
        for plugin, label in ((NVIDIA_DEVICE_PLUGIN, GPU_LABEL), (EFA_DEVICE_PLUGIN, EFA_LABEL)):
            k8s.helm.v3.Release(
                f"{name}-{plugin['chart']}",
                name=plugin["chart"],
                chart=plugin["chart"],
                version=plugin["version"],
                repository_opts={"repo": plugin["repo"]},
                namespace="kube-system",
                values=device_plugin_values(label),
                opts=in_cluster,
            )
        k8s.kustomize.v2.Directory(
            f"{name}-training-operator",
            directory=TRAINING_OPERATOR_OVERLAY,
            opts=in_cluster,
        )
        self.namespace = training_ns.metadata.name
        self.register_outputs({"namespace": self.namespace})
