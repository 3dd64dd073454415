"""cluster-autoscaler (Helm, pinned in `infra.settings.versions`): grows a GPU node group when
pods of a job cannot be scheduled and shrinks it when its nodes idle, so a stack rests at zero
GPU nodes.

It finds the managed node groups by the tags EKS puts on their Auto Scaling groups and learns
what an empty group's nodes would offer from the node-template tags `infra.gpu_nodes` adds.
Its AWS permissions come by Pod Identity; scaling calls are limited to this cluster's groups.

With `autoscaler.provisioningRequests` on, it also serves ProvisioningRequests
(`--enable-provisioning-requests`), which Kueue's ProvisioningRequest admission check creates to
get capacity for a whole gang before admitting it (all-or-nothing scale-up).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.cluster_addons import helm_release
from infra.iam import pod_identity_role
from infra.policies import policy_document
from infra.settings.types import AutoscalerConfig
from infra.settings.versions import CLUSTER_AUTOSCALER

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
SYSTEM_NODES = {"trainstack.io/role": "system"}


def autoscaler_policy(cluster_name: str) -> str:
    """Reads are account-wide (these Describe calls take no resource); scaling only for groups
    tagged as this cluster's (EKS tags its managed node groups' ASGs so)."""
    owned = f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}"
    return policy_document(
        [
            {
                "Sid": "DescribeCapacity",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                    "eks:DescribeNodegroup",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ScaleThisClustersGroups",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:TerminateInstanceInAutoScalingGroup",
                ],
                "Resource": "*",
                "Condition": {"StringEquals": {owned: "owned"}},
            },
        ]
    )


def autoscaler_values(cluster_name: str, region: str, config: AutoscalerConfig) -> dict:
    extra_args = {
        # Fill the group that wastes least; a gang of 4 p5 nodes wants one group, not a mix.
        "expander": "least-waste",
        "balance-similar-node-groups": "false",
        "skip-nodes-with-system-pods": "false",
        "scale-down-unneeded-time": f"{config.scale_down_idle_minutes}m",
        "scale-down-delay-after-add": f"{config.scale_down_idle_minutes}m",
        # GPU nodes take minutes to pull the image and start the device plugins.
        "max-node-provision-time": "25m",
    }
    if config.provisioning_requests:
        extra_args["enable-provisioning-requests"] = "true"
    return {
        "autoDiscovery": {"clusterName": cluster_name},
        "awsRegion": region,
        "cloudProvider": "aws",
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "extraArgs": extra_args,
        "nodeSelector": SYSTEM_NODES,
        "priorityClassName": "system-cluster-critical",
    }


class ClusterAutoscaler(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        config: AutoscalerConfig,
        cluster_name: pulumi.Output[str],
        region: str,
        partition: str,
        account_id: str,
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:ClusterAutoscaler", name, None, opts)
        role, association = pod_identity_role(
            f"{name}-autoscaler",
            self,
            partition,
            account_id,
            cluster_name,
            NAMESPACE,
            SERVICE_ACCOUNT,
            inline_policy=cluster_name.apply(autoscaler_policy),
        )
        helm_release(
            name,
            CLUSTER_AUTOSCALER,
            NAMESPACE,
            cluster_name.apply(lambda cluster: autoscaler_values(cluster, region, config)),
            # Credentials must exist before its first call, or it starts without any.
            pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[association]),
        )
        self.role_arn = role.arn
        self.register_outputs({"role_arn": self.role_arn})
