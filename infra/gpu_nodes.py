"""One managed GPU node group: its launch template (EFA interfaces, placement, IMDSv2, encrypted
root volume, capacity reservation or block), its EFA security group and placement group."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.launch_template import efa_network_interfaces, metadata_options, root_volume
from infra.settings import GpuNodeGroupConfig

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
GPU_LABEL = "nvidia.com/gpu.present"
EFA_LABEL = "vpc.amazonaws.com/efa.present"
GROUP_LABEL = "trainstack.io/node-group"


def node_labels(config: GpuNodeGroupConfig) -> dict[str, str]:
    """Labels the device plugins select on, and that jobs can use to pick a group."""
    labels = {GPU_LABEL: "true", GROUP_LABEL: config.name}
    if config.instance.has_efa:
        labels[EFA_LABEL] = "true"
    return labels


class GpuNodeGroup(pulumi.ComponentResource):
    node_group: aws.eks.NodeGroup

    def __init__(
        self,
        name: str,
        config: GpuNodeGroupConfig,
        cluster_name: pulumi.Input[str],
        node_role_arn: pulumi.Input[str],
        vpc_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        cluster_security_group_id: pulumi.Input[str],
        depends_on: list[pulumi.Resource] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:GpuNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # EFA traffic must be allowed to and from the group itself, in both directions.
        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa",
            vpc_id=vpc_id,
            description=f"EFA traffic within GPU node group {config.name}",
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-efa-in",
            security_group_id=efa_sg.id,
            referenced_security_group_id=efa_sg.id,
            ip_protocol="-1",
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-efa-out",
            security_group_id=efa_sg.id,
            referenced_security_group_id=efa_sg.id,
            ip_protocol="-1",
            opts=child,
        )

        template_args: dict = {}
        if config.placement_group:
            placement = aws.ec2.PlacementGroup(f"{name}-placement", strategy="cluster", opts=child)
            template_args["placement"] = {"group_name": placement.name}
        if config.capacity_reservation_id:
            template_args["capacity_reservation_specification"] = {
                "capacity_reservation_target": {
                    "capacity_reservation_id": config.capacity_reservation_id
                }
            }
        if config.capacity_block:
            template_args["instance_market_options"] = {"market_type": "capacity-block"}

        template = aws.ec2.LaunchTemplate(
            f"{name}-template",
            description=f"trainstack GPU nodes {config.name} ({config.instance.name})",
            network_interfaces=efa_network_interfaces(
                config.instance, efa_sg.id, cluster_security_group_id
            ),
            block_device_mappings=[root_volume(config.root_volume_gib)],
            metadata_options=metadata_options(hop_limit=1),
            tag_specifications=[
                {"resource_type": "instance", "tags": {"Name": f"{name}-{config.name}"}}
            ],
            update_default_version=True,
            opts=child,
            **template_args,
        )
        self.node_group = aws.eks.NodeGroup(
            f"{name}-nodes",
            cluster_name=cluster_name,
            node_group_name_prefix=f"{config.name}-",
            node_role_arn=node_role_arn,
            subnet_ids=[subnet_id],
            ami_type="AL2023_x86_64_NVIDIA",
            instance_types=[config.instance.name],
            capacity_type=config.capacity_type,
            scaling_config={
                "min_size": config.min_size,
                "desired_size": config.desired_size,
                "max_size": config.max_size,
            },
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            labels=node_labels(config),
            taints=[GPU_TAINT],
            # Replace one node at a time: a training job spans the whole group.
            update_config={"max_unavailable": 1},
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on or []),
        )
        self.efa_security_group_id = efa_sg.id
        self.register_outputs({"node_group": self.node_group.node_group_name})
