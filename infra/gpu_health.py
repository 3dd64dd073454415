"""GPU health you can see: NVIDIA's DCGM exporter (Helm, pinned in `infra.settings.versions`) on
every GPU node, serving GPU metrics, including Xid errors (`DCGM_FI_DEV_XID_ERRORS`), on port
9400 for any Prometheus-style scraper. The EKS node monitoring agent (a managed add-on,
`infra.cluster`) turns the same faults into node conditions that the node groups' auto repair
acts on."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.cluster_addons import GPU_TOLERATION, helm_release
from infra.gpu_nodes import GPU_LABEL
from infra.settings.versions import DCGM_EXPORTER

NAMESPACE = "kube-system"
METRICS_PORT = 9400


def dcgm_exporter_values() -> dict:
    return {
        "nodeSelector": {GPU_LABEL: "true"},
        "tolerations": [GPU_TOLERATION],
        "service": {"port": METRICS_PORT},
        # No Prometheus operator is installed; scrape the service or port-forward to it.
        "serviceMonitor": {"enabled": False},
    }


class GpuHealth(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:GpuHealth", name, None, opts)
        helm_release(
            name,
            DCGM_EXPORTER,
            NAMESPACE,
            dcgm_exporter_values(),
            pulumi.ResourceOptions(parent=self, provider=k8s_provider),
        )
        self.register_outputs({})
