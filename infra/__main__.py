"""The trainstack stack: validate config, wire one component per concern, export outputs.

Run by `pulumi up` (Pulumi.yaml points here); tests run it under Pulumi's mocks.
"""

import pulumi

from infra.ci import ImageBuild
from infra.cluster import Cluster
from infra.cluster_addons import ClusterAddons
from infra.config import load_stack_config
from infra.costs import group_summary, hourly_usd
from infra.gpu_nodes import GpuNodeGroup
from infra.identity import TrainingIdentity
from infra.kueue import Kueue
from infra.network import Network
from infra.registry import Registry
from infra.shared_fs import SharedFileSystem
from infra.storage import RunStorage

config = load_stack_config()  # raises ConfigError before any resource exists
name = config.cluster.name

network = Network(name, config.network, config.region)
registry = Registry(name, config.repository_name, config.untagged_image_days)
storage = RunStorage(name)
cluster = Cluster(
    name,
    config.cluster,
    config.system_nodes,
    config.region,
    network.private_subnet_ids,
    fsx_csi=config.fsx is not None,
)
gpu_groups = [
    GpuNodeGroup(
        f"{name}-{group.name}",
        group,
        cluster_name=cluster.name,
        node_role_arn=cluster.node_role_arn,
        vpc_id=network.vpc_id,
        subnet_id=network.gpu_subnet_id,
        cluster_security_group_id=cluster.security_group_id,
        depends_on=[cluster.system_nodes],
    )
    for group in config.gpu_node_groups
]
addons = ClusterAddons(
    name,
    cluster.kubeconfig,
    config.namespace,
    depends_on=[cluster.system_nodes, *cluster.access_ready],
)
kueue = (
    Kueue(name, config.kueue, config.gpu_node_groups, addons.namespace, addons.provider)
    if config.kueue
    else None
)
identity = TrainingIdentity(
    name,
    cluster_name=cluster.name,
    namespace=addons.namespace,
    service_account=config.service_account,
    partition=config.cluster.partition,
    bucket_arn=storage.bucket_arn,
    bucket_key_arn=storage.key_arn,
    repository_arn=registry.repository_arn,
    k8s_provider=addons.provider,
)
shared_fs = (
    SharedFileSystem(
        name,
        config.fsx,
        vpc_id=network.vpc_id,
        subnet_id=network.gpu_subnet_id,
        client_security_group_id=cluster.security_group_id,
        bucket=storage.bucket,
        kms_key_arn=storage.key_arn,
        namespace=addons.namespace,
        k8s_provider=addons.provider,
    )
    if config.fsx
    else None
)
image_build = (
    ImageBuild(
        name,
        config.ci,
        config.region,
        config.cluster.partition,
        repository_arn=registry.repository_arn,
        repository_url=registry.repository_url,
        artifacts_bucket=storage.bucket,
        artifacts_bucket_arn=storage.bucket_arn,
        artifacts_key_arn=storage.key_arn,
        log_retention_days=config.cluster.log_retention_days,
    )
    if config.ci
    else None
)

outputs = {
    "cluster_name": cluster.name,
    "region": config.region,
    "kubernetes_version": config.cluster.kubernetes_version,
    "kubeconfig": cluster.kubeconfig,
    "repository_url": registry.repository_url,
    "bucket": storage.bucket,
    "storage_root": storage.root,
    "namespace": addons.namespace,
    "service_account": identity.service_account,
    "training_role_arn": identity.role_arn,
    "gpu_node_groups": [group_summary(g) for g in config.gpu_node_groups],
    "gpu_hourly_usd_desired": hourly_usd(config.gpu_node_groups),
    "gpu_hourly_usd_at_rest": hourly_usd(config.gpu_node_groups, at_rest=True),
    "fsx_claim": shared_fs.claim_name if shared_fs else None,
    "image_build_project": image_build.project_name if image_build else None,
    "local_queue": kueue.local_queue if kueue else None,
}
for key, value in outputs.items():
    pulumi.export(key, value)
