"""The EKS control plane, its managed add-ons and the CPU system node group for operators.

Secure defaults: secrets envelope-encrypted with a KMS key, API endpoint private (public only
for listed CIDRs), every control-plane log type on, API authentication mode with one access
entry for the admin role (the creator gets no implicit admin).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.iam import service_role
from infra.kubeconfig import eks_kubeconfig
from infra.launch_template import metadata_options, root_volume
from infra.policies import kms_key_policy
from infra.protection import stateful
from infra.settings.types import ClusterConfig, DataProtection, SystemNodeGroupConfig
from infra.settings.versions import EKS_ADDONS

SYSTEM_NODE_LABELS = {"trainstack.io/role": "system"}
"""What the system node group's nodes carry: Kueue's `system` flavor selects them."""

ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# Managed add-ons installed before nodes join (networking, credentials) and after (they need
# a node to schedule on). The node monitoring agent sets the node conditions (GPU Xid errors,
# NCCL/EFA faults, kernel) that GPU node groups' auto repair acts on.
EARLY_ADDONS = ("eks-pod-identity-agent", "kube-proxy")
LATE_ADDONS = ("coredns", "eks-node-monitoring-agent")


VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
"""The vpc-cni add-on's configuration values (its JSON schema wants the string "true")."""


class Cluster(pulumi.ComponentResource):
    name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    system_nodes: aws.eks.NodeGroup

    def __init__(
        self,
        name: str,
        config: ClusterConfig,
        system_nodes: SystemNodeGroupConfig,
        protection: DataProtection,
        region: str,
        subnet_ids: list[pulumi.Input[str]],
        fsx_csi: bool,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = config.partition

        secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS secrets envelope encryption for {config.name}",
            enable_key_rotation=True,
            deletion_window_in_days=protection.kms_deletion_window_days,
            # Deleting it makes the cluster's secrets unreadable.
            opts=stateful(self, protection),
        )
        role = service_role(
            f"{name}-control-plane",
            "eks.amazonaws.com",
            self,
            partition,
            ("AmazonEKSClusterPolicy",),
            inline_policy=secrets_key.arn.apply(
                lambda arn: kms_key_policy(
                    arn, ["kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:ListGrants"]
                )
            ),
        )
        # Created up front so its retention applies (EKS would create it without one).
        log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=f"/aws/eks/{config.name}/cluster",
            retention_in_days=config.log_retention_days,
            opts=child,
        )
        cluster = aws.eks.Cluster(
            f"{name}-eks",
            name=config.name,
            version=config.kubernetes_version,
            role_arn=role.arn,
            vpc_config={
                "subnet_ids": subnet_ids,
                "endpoint_private_access": True,
                "endpoint_public_access": bool(config.public_access_cidrs),
                "public_access_cidrs": list(config.public_access_cidrs) or None,
            },
            access_config={
                "authentication_mode": "API",
                "bootstrap_cluster_creator_admin_permissions": False,
            },
            encryption_config={
                "provider": {"key_arn": secrets_key.arn},
                "resources": ["secrets"],
            },
            enabled_cluster_log_types=list(config.log_types),
            # STANDARD: once the version leaves standard support EKS upgrades the cluster
            # instead of silently billing extended support.
            upgrade_policy={"support_type": "STANDARD"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[log_group]),
        )
        admin = aws.eks.AccessEntry(
            f"{name}-admin",
            cluster_name=cluster.name,
            principal_arn=config.admin_role_arn,
            type="STANDARD",
            opts=child,
        )
        admin_policy = aws.eks.AccessPolicyAssociation(
            f"{name}-admin",
            cluster_name=cluster.name,
            principal_arn=admin.principal_arn,
            policy_arn=f"arn:{partition}:eks::aws:cluster-access-policy/{ADMIN_POLICY}",
            access_scope={"type": "cluster"},
            opts=child,
        )

        def addon(
            addon_name: str,
            depends_on: list[pulumi.Resource],
            version: str | None = None,
            **kwargs,
        ) -> aws.eks.Addon:
            return aws.eks.Addon(
                f"{name}-{addon_name}",
                cluster_name=cluster.name,
                addon_name=addon_name,
                addon_version=version or EKS_ADDONS[addon_name],
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
                **kwargs,
            )

        early = [addon(a, []) for a in EARLY_ADDONS]
        # The CNI gets its AWS permissions by Pod Identity, not from the node role.
        cni_role = service_role(
            f"{name}-vpc-cni",
            "pods.eks.amazonaws.com",
            self,
            partition,
            ("AmazonEKS_CNI_Policy",),
            tag_session=True,
            source_account=config.account_id,
        )
        early.append(
            addon(
                "vpc-cni",
                early[:1],
                version=config.vpc_cni_version,
                pod_identity_associations=[
                    {"role_arn": cni_role.arn, "service_account": "aws-node"}
                ],
                # The CNI's network policy agent enforces NetworkPolicy objects (off by default:
                # without it the training namespace's default deny would be ignored).
                configuration_values=json.dumps(VPC_CNI_CONFIGURATION),
            )
        )

        node_role = service_role(
            f"{name}-node",
            "ec2.amazonaws.com",
            self,
            partition,
            (
                "AmazonEKSWorkerNodePolicy",
                "AmazonEC2ContainerRegistryPullOnly",
            ),
        )
        system_template = aws.ec2.LaunchTemplate(
            f"{name}-system",
            description="trainstack system nodes (operators, CoreDNS)",
            block_device_mappings=[root_volume(system_nodes.root_volume_gib)],
            # Operators may read instance metadata from pods: allow one extra hop, tokens only.
            metadata_options=metadata_options(hop_limit=2),
            update_default_version=True,
            opts=child,
        )
        self.system_nodes = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=subnet_ids,
            ami_type="AL2023_x86_64_STANDARD",
            instance_types=[system_nodes.instance_type],
            scaling_config={
                "min_size": system_nodes.min_size,
                "desired_size": system_nodes.desired_size,
                "max_size": system_nodes.max_size,
            },
            launch_template={
                "id": system_template.id,
                "version": system_template.latest_version.apply(str),
            },
            labels=dict(SYSTEM_NODE_LABELS),
            update_config={"max_unavailable": 1},
            opts=pulumi.ResourceOptions(parent=self, depends_on=early),
        )
        late_addons = list(LATE_ADDONS) + (["aws-fsx-csi-driver"] if fsx_csi else [])
        for addon_name in late_addons:
            addon(addon_name, [self.system_nodes])

        self.name = cluster.name
        self.arn = cluster.arn
        self.endpoint = cluster.endpoint
        self.security_group_id = cluster.vpc_config.cluster_security_group_id
        self.node_role_arn = node_role.arn
        self.access_ready = [admin_policy]
        """Depend on these before talking to the Kubernetes API as the admin role."""
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                cluster.name, cluster.endpoint, cluster.certificate_authority.data
            ).apply(lambda args: eks_kubeconfig(args[0], args[1], args[2], region))
        )
        self.register_outputs({"name": self.name, "endpoint": self.endpoint})
