"""Every version the stack installs, in one place: Kubernetes, EKS add-ons, Helm charts and the
training operator. Bump here; the tests check each pin is set and the EFA chart fixture matches.

Checked against the projects' releases in 2026-11.
"""

from __future__ import annotations

# The default control-plane version lives in catalog/kubernetes.py: jobs validates pod templates
# against the same version. The cluster's `upgradePolicy` is STANDARD, so a cluster left behind
# is upgraded, not billed for extended support.
from catalog.kubernetes import KUBERNETES_VERSION as KUBERNETES_VERSION

VPC_CNI_VERSION = "v1.20.1-eksbuild.3"
"""Default `trainstack:vpcCniVersion`; at least v1.19.0 (leaves `efa-only` interfaces alone)."""

EKS_ADDONS: dict[str, str | None] = {
    "eks-pod-identity-agent": None,
    "kube-proxy": None,
    "coredns": None,
    "aws-fsx-csi-driver": None,
    "eks-node-monitoring-agent": None,
}
"""Managed add-ons other than the VPC CNI. None: the version EKS marks default for the cluster's
Kubernetes minor (kube-proxy and CoreDNS builds are per minor, so a fixed pin would break the
next control-plane upgrade); set a `vX.Y.Z-eksbuild.N` to pin one."""


def helm_chart(chart: str, version: str, repo: str) -> dict[str, str]:
    return {"chart": chart, "version": version, "repo": repo}


NVIDIA_DEVICE_PLUGIN = helm_chart(
    "nvidia-device-plugin", "0.19.3", "https://nvidia.github.io/k8s-device-plugin"
)
EFA_DEVICE_PLUGIN = helm_chart(
    "aws-efa-k8s-device-plugin", "v0.5.30", "https://aws.github.io/eks-charts"
)
"""Chart v0.5.30 (plugin v0.5.20). Its template builds the node affinity from
`supportedInstanceLabels` and reads `nodeSelector`; it has no `affinity` value (see
tests/infra/test_efa_chart.py, which renders the vendored template)."""
CLUSTER_AUTOSCALER = helm_chart(
    "cluster-autoscaler", "9.58.0", "https://kubernetes.github.io/autoscaler"
)
DCGM_EXPORTER = helm_chart(
    "dcgm-exporter", "4.8.3", "https://nvidia.github.io/dcgm-exporter/helm-charts"
)
KUEUE = helm_chart("kueue", "0.19.2", "oci://registry.k8s.io/kueue/charts")
"""Kueue (infra/kueue.py): queues, all-or-nothing admission and priorities for training jobs.
Kueue rewrites a queued TrainJob with the Trainer types it vendors, dropping what they lack: 0.14
vendors Trainer 2.0.1 (no `runtimePatches`, no `activeDeadlineSeconds`: every queued TrainJob
lost its patch); 0.17 is the first with `runtimePatches`; 0.19.2 (the newest release) vendors
Trainer 2.2.1, which lacks only the patch's `terminationGracePeriodSeconds` of what trainstack
writes (jobs/backends/kubernetes/trainjob.py leaves it to the runtime). No released Kueue vendors
Trainer 2.3.
testing_support/k8s/data/kueue_trainer_fields.json holds the fields of the pinned one's types."""
KUBEFLOW_TRAINER = helm_chart("kubeflow-trainer", "2.3.0", "oci://ghcr.io/kubeflow/charts")
"""Kubeflow Trainer v2 (infra/kubeflow_trainer.py): the TrainJob API (trainer.kubeflow.org/
v1alpha1) and its controller; the chart installs JobSet as its dependency."""
JOBSET_VERSION = "0.12.0"
"""The JobSet chart Kubeflow Trainer 2.3.0 depends on (its Chart.yaml), installed with it."""
KUBERAY = helm_chart("kuberay-operator", "1.6.2", "https://ray-project.github.io/kuberay-helm/")
"""KubeRay: the RayJob/RayCluster API (ray.io/v1) and its operator (infra/kuberay.py, with
`trainstack:rayJobs`; localcluster builds it). 1.6.2 is
the ray-operator Kueue 0.19.2 builds against (its go.mod requires
github.com/ray-project/kuberay/ray-operator v1.6.2): Kueue reads and rewrites a queued RayJob
with those types, so a newer operator's fields would be dropped the way Trainer's were."""
FLUENT_BIT = helm_chart("aws-for-fluent-bit", "0.2.1", "https://aws.github.io/eks-charts")
"""Chart 0.2.1 (aws-for-fluent-bit 3.4.16): its core `cloudwatch_logs` output takes EKS Pod
Identity credentials (infra/container_logs.py)."""
HELM_CHARTS = (
    NVIDIA_DEVICE_PLUGIN,
    EFA_DEVICE_PLUGIN,
    CLUSTER_AUTOSCALER,
    DCGM_EXPORTER,
    KUEUE,
    KUBEFLOW_TRAINER,
    KUBERAY,
    FLUENT_BIT,
)

PULUMI_CLI_VERSION = "3.272.0"
"""The Pulumi CLI the in-VPC deploy (infra/deploy/buildspec.yml) installs: the version of the
Python SDK in constraints.txt (CLI and SDK are released together)."""

TRAINING_OPERATOR_VERSION = "v1.9.4"
"""Kubeflow Training Operator: the last v1 patch (PyTorchJob API kubeflow.org/v1), installed
instead of Kubeflow Trainer when `trainstack:trainingOperator` is `pytorchjob`."""
TRAINING_OPERATOR_OVERLAY = (
    # kustomize's remote form (repo//path?ref=tag); the provider clones it with `git`.
    "https://github.com/kubeflow/trainer//manifests/overlays/standalone"
    f"?ref={TRAINING_OPERATOR_VERSION}"
)
