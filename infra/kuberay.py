"""KubeRay in the cluster (`trainstack:rayJobs`): the RayJob API (ray.io/v1) that `job.api=rayjob`
submits, gang-admitted by Kueue (infra/kueue.py integrates `ray.io/rayjob`).

The operator is its pinned Helm chart (infra/settings/versions.py `KUBERAY`) in its own
namespace, which enforces the restricted Pod Security Standard like the training namespace. It
watches the training namespace alone, with namespaced RBAC there (a Role, no ClusterRole), runs
no webhook and tolerates no taint, so it never lands on a GPU node (`kuberay_values`).

The CRDs are the same tag's chart `crds/` (what Helm would install), applied by the Kubernetes
provider with server-side apply (pulumi-kubernetes 4's default, which the Training Operator's
DeploymentPatch in infra/cluster_addons.py relies on too), and the chart's own install of them is
skipped: the RayJob CRD is 1.35 MB, far past the 256 KiB `last-applied-configuration` annotation
that a client-side apply writes, and Helm installs `crds/` only on a first install, never on an
upgrade, so a version bump would have left the old schema in place. The provider fetches them
during `pulumi up`/`preview`; the program downloads nothing (tests under mocks stay offline).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.cluster_addons import POD_SECURITY_LABELS, helm_release
from infra.settings.versions import KUBERAY
from jobs.backends.kubernetes.client.kinds import KUBERAY_NAMESPACE, RAYJOB

KUBERAY_CHART = KUBERAY
KUBERAY_VERSION = KUBERAY["version"]
RAYJOB_API = RAYJOB.api
CRD_PLURALS = ("rayclusters", "raycronjobs", "rayjobs", "rayservices")
"""The chart's `crds/` at the pinned tag (ray-project/kuberay v1.6.2,
helm-chart/kuberay-operator/crds/ray.io_<plural>.yaml). The operator's RayCluster, RayJob and
RayService controllers always start (ray-operator/main.go), so it needs those three; the
RayCronJob one is installed as Helm would, its controller off (feature gate `RayCronJob`)."""
OPERATOR_RESOURCES = {"cpu": "100m", "memory": "512Mi"}
"""The chart's own limits (values.yaml `resources.limits`: 100m, 512Mi, "managing 500 Ray pods
requires roughly 500MB memory"), requested as well: the operator is Guaranteed."""


def crd_urls(version: str = KUBERAY_VERSION) -> list[str]:
    """The CRD files of chart `version`, at its tag (`v<version>`: the repository's tag of the
    chart and of the ray-operator module, one commit)."""
    base = f"https://raw.githubusercontent.com/ray-project/kuberay/v{version}"
    return [
        f"{base}/helm-chart/kuberay-operator/crds/ray.io_{plural}.yaml" for plural in CRD_PLURALS
    ]


def kuberay_values(watch_namespace: str) -> dict:
    """Pure: the chart's values, each a key of ray-project/kuberay v1.6.2
    helm-chart/kuberay-operator/values.yaml (templates/ named where they read it)."""
    return {
        # `singleNamespaceInstall`: Roles and RoleBindings instead of the ClusterRole and its
        # binding (templates/role.yaml and rolebinding.yaml render only without it), and no
        # cluster-wide rayjob/raycluster editor and viewer ClusterRoles (ray_*_role.yaml).
        "singleNamespaceInstall": True,
        # `watchNamespace`: templates/deployment.yaml passes `--watch-namespace <joined>`, so the
        # operator's cache holds that namespace alone (ray-operator/main.go, DefaultNamespaces);
        # templates/multiple_namespaces_role.yaml puts its Role there (not in its own).
        "watchNamespace": [watch_namespace],
        # `rbacEnable`, `crNamespacedRbacEnable` (the defaults, stated): the chart makes that Role
        # and the leader-election Role (templates/leader_election_role.yaml) itself.
        "rbacEnable": True,
        "crNamespacedRbacEnable": True,
        # `env` (none by default): ray-operator/main.go starts its RayCluster webhook only when
        # ENABLE_WEBHOOKS is "true", and the chart has no webhook configuration to call it.
        "env": [{"name": "ENABLE_WEBHOOKS", "value": "false"}],
        # `tolerations` (default []): none, so the GPU taint keeps it on the system nodes.
        "tolerations": [],
        # `resources` (default: limits only).
        "resources": {"requests": dict(OPERATOR_RESOURCES), "limits": dict(OPERATOR_RESOURCES)},
        # `batchScheduler` (default off): none; Kueue admits a RayJob by un-suspending it.
        "batchScheduler": {"enabled": False, "name": ""},
        # `securityContext` (the chart's default, stated: its namespace enforces `restricted`;
        # the image runs as 65532, ray-operator/Dockerfile).
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # `metrics.serviceMonitor.enabled` (default false): no Prometheus operator here.
        "metrics": {"serviceMonitor": {"enabled": False}},
    }


def installed_job_kinds(training_operator: str, *, ray_jobs: bool) -> list[str]:
    """The stack output `job_kinds`: the job APIs (`job.api`) the cluster serves."""
    return [training_operator, *([RAYJOB_API] if ray_jobs else [])]


class KubeRay(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(
        self,
        name: str,
        watch_namespace: pulumi.Input[str],
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:KubeRay", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=k8s_provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-kuberay",
            metadata={"name": KUBERAY_NAMESPACE, "labels": POD_SECURITY_LABELS},
            opts=in_cluster,
        )
        crds = k8s.yaml.v2.ConfigGroup(f"{name}-kuberay-crds", files=crd_urls(), opts=in_cluster)
        release = helm_release(
            name,
            KUBERAY_CHART,
            KUBERAY_NAMESPACE,
            pulumi.Output.from_input(watch_namespace).apply(kuberay_values),
            pulumi.ResourceOptions.merge(
                in_cluster, pulumi.ResourceOptions(depends_on=[namespace, crds])
            ),
            skip_crds=True,
        )
        self.release = release
        self.register_outputs({})
