"""One managed GPU node group: its launch template (EFA interfaces, placement, IMDSv2, encrypted
root volume, hugepages, capacity reservation or block), its EFA security group and placement
group, the Auto Scaling group tags that let cluster-autoscaler scale it from zero, node auto
repair, and for a Capacity Block the scheduled scale-to-zero before the block ends.

Pulumi sets the sizes once; after that the autoscaler owns the desired size (`ignore_changes`),
so `pulumi up` never undoes a scale-up or scale-down."""

from __future__ import annotations

from datetime import datetime, timedelta

import pulumi
import pulumi_aws as aws

from catalog.pods import HUGEPAGES_2MI
from infra.launch_template import (
    efa_network_interfaces,
    hugepages_user_data,
    metadata_options,
    root_volume,
)
from infra.settings.types import GpuNodeGroupConfig

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
GPU_LABEL = "nvidia.com/gpu.present"
EFA_LABEL = "vpc.amazonaws.com/efa.present"
GROUP_LABEL = "trainstack.io/node-group"
NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"
CAPACITY_BLOCK_LEAD_MINUTES = 60
"""Scale a Capacity Block group to zero this long before the block ends: EC2 starts terminating
its instances 30 minutes before the end, and jobs need time to checkpoint on SIGTERM."""


def node_labels(config: GpuNodeGroupConfig) -> dict[str, str]:
    """Labels the device plugins select on, and that jobs can use to pick a group."""
    labels = {GPU_LABEL: "true", GROUP_LABEL: config.name}
    if config.instance.has_efa:
        labels[EFA_LABEL] = "true"
    return labels


def node_template_tags(config: GpuNodeGroupConfig) -> dict[str, str]:
    """What a node of this group will look like, for cluster-autoscaler to simulate while the
    group has no node to copy (scale from zero): labels, the GPU taint, and the extended
    resources the device plugins and kubelet will advertise."""
    instance = config.instance
    tags = {f"{NODE_TEMPLATE}/label/{k}": v for k, v in node_labels(config).items()}
    tags[f"{NODE_TEMPLATE}/taint/{GPU_TAINT['key']}"] = f"{GPU_TAINT['value']}:NoSchedule"
    tags[f"{NODE_TEMPLATE}/resources/nvidia.com/gpu"] = str(instance.gpus)
    if instance.has_efa:
        tags[f"{NODE_TEMPLATE}/resources/vpc.amazonaws.com/efa"] = str(instance.efa_interfaces)
        tags[f"{NODE_TEMPLATE}/resources/hugepages-2Mi"] = HUGEPAGES_2MI
    return tags


def update_config(config: GpuNodeGroupConfig) -> dict:
    """Rolling updates. A reservation or block has no spare instance for the default strategy's
    surge (new node first), so those groups take a node down before launching its successor."""
    if config.capacity_reservation_id:
        return {"max_unavailable": 1, "update_strategy": "MINIMAL"}
    return {"max_unavailable": 1, "update_strategy": "DEFAULT"}


def scale_to_zero_time(block_end: datetime) -> str:
    return (block_end - timedelta(minutes=CAPACITY_BLOCK_LEAD_MINUTES)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


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
            user_data=hugepages_user_data() if config.instance.has_efa else None,
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
            update_config=update_config(config),
            # Replace a node whose GPU, EFA or kernel the node monitoring agent reports broken
            # (e.g. Xid errors) instead of letting it take the next job.
            node_repair_config={"enabled": True},
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=depends_on or [],
                ignore_changes=["scalingConfig.desiredSize"],
            ),
        )
        group_name = self.node_group.resources.apply(
            lambda resources: resources[0]["autoscaling_groups"][0]["name"]
        )
        for index, (key, value) in enumerate(sorted(node_template_tags(config).items())):
            aws.autoscaling.Tag(
                f"{name}-template-{index}",
                autoscaling_group_name=group_name,
                tag={"key": key, "value": value, "propagate_at_launch": False},
                opts=child,
            )
        if config.capacity_block_end is not None:
            aws.autoscaling.Schedule(
                f"{name}-block-end",
                autoscaling_group_name=group_name,
                scheduled_action_name=f"{config.name}-capacity-block-end",
                start_time=scale_to_zero_time(config.capacity_block_end),
                min_size=0,
                max_size=0,
                desired_capacity=0,
                opts=child,
            )
        self.efa_security_group_id = efa_sg.id
        self.register_outputs({"node_group": self.node_group.node_group_name})
