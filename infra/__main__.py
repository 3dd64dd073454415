"""The trainstack stack: validate config, wire one component per concern, export outputs.

Run by `pulumi up` (Pulumi.yaml points here); tests run it under Pulumi's mocks.
"""

import pulumi

from infra.autoscaler import ClusterAutoscaler
from infra.bucket_layout import DATA_PREPARE, TRAINING, published_grants
from infra.ci import ImageBuild
from infra.cluster import Cluster
from infra.cluster_addons import ClusterAddons
from infra.container_logs import ContainerLogs
from infra.costs import group_summary, hourly_usd
from infra.github_deploy import github_deploy_role
from infra.gpu_health import GpuHealth
from infra.gpu_nodes import GpuNodeGroup
from infra.identity import TrainingIdentity
from infra.kubeflow_trainer import TRAINJOB_API, KubeflowTrainer
from infra.kuberay import KubeRay, installed_job_kinds
from infra.kueue import Kueue
from infra.network import Network
from infra.registry import Registry
from infra.serving import Serving
from infra.settings.stack import load_stack_config
from infra.shared_fs import KeyOwner, SharedFileSystem
from infra.storage import RunStorage
from infra.training_api import TrainingApi
from infra.vpc_deploy import VpcDeploy

config = load_stack_config()  # raises ConfigError before any resource exists
name = config.cluster.name

network = Network(name, config.network, config.region)
registry = Registry(name, config.repository_name, config.untagged_image_days, config.protection)
storage = RunStorage(name, config.protection, config.runs_kms_key_arn)
cluster = Cluster(
    name,
    config.cluster,
    config.system_nodes,
    config.protection,
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
deploy = (
    VpcDeploy(
        name,
        config.deploy,
        config.region,
        config.cluster.partition,
        config.cluster.account_id,
        vpc_id=network.vpc_id,
        subnet_ids=network.private_subnet_ids,
        cluster_name=cluster.name,
        cluster_arn=cluster.arn,
        cluster_security_group_id=cluster.security_group_id,
        log_retention_days=config.cluster.log_retention_days,
    )
    if config.deploy
    else None
)
image_build = (
    ImageBuild(
        name,
        config.ci,
        config.region,
        config.cluster.partition,
        account_id=config.cluster.account_id,
        preview_secret_arns=(
            (config.training_api.token_hashes_secret_arn,) if config.training_api else ()
        ),
        repository_arn=registry.repository_arn,
        repository_url=registry.repository_url,
        repository_name=registry.repository_name,
        cache_repository_arn=registry.cache_repository_arn,
        cache_repository_url=registry.cache_repository_url,
        cache_repository_name=registry.cache_repository_name,
        artifacts_bucket=storage.bucket,
        artifacts_bucket_arn=storage.bucket_arn,
        artifacts_key_arn=storage.key_arn,
        log_retention_days=config.cluster.log_retention_days,
    )
    if config.ci
    else None
)
github_deploy = (
    github_deploy_role(
        name,
        config,
        image_build.github.provider_arn,
        repository_arn=registry.repository_arn,
        cluster=cluster,
        deploy=deploy,
    )
    if image_build
    else None
)
addons = ClusterAddons(
    name,
    cluster.kubeconfig,
    config.namespace,
    training_operator=config.training_operator,
    # Whichever identity runs `pulumi up` (admin or deploy role) has its access entry first.
    depends_on=[
        cluster.system_nodes,
        *cluster.access_ready,
        *(deploy.access_ready if deploy else []),
        *(github_deploy.access_ready if github_deploy else []),
    ],
)
autoscaler = ClusterAutoscaler(
    name,
    config.autoscaler,
    cluster_name=cluster.name,
    region=config.region,
    partition=config.cluster.partition,
    account_id=config.cluster.account_id,
    k8s_provider=addons.provider,
)
gpu_health = GpuHealth(name, addons.provider)
trainer = (
    KubeflowTrainer(name, config.gpu_node_groups, config.service_account, addons.provider)
    if config.training_operator == TRAINJOB_API
    else None
)
container_logs = ContainerLogs(
    name,
    cluster_name=cluster.name,
    region=config.region,
    partition=config.cluster.partition,
    account_id=config.cluster.account_id,
    namespace=addons.namespace,
    retention_days=config.cluster.log_retention_days,
    k8s_provider=addons.provider,
)
kuberay = KubeRay(name, addons.namespace, addons.provider) if config.ray_jobs else None
kueue = (
    Kueue(
        name,
        config.kueue,
        config.gpu_node_groups,
        addons.namespace,
        addons.provider,
        training_operator=config.training_operator,
        operators=[r.release for r in (trainer, kuberay) if r],
        ray_jobs=config.ray_jobs,
    )
    if config.kueue
    else None
)
identity = TrainingIdentity(
    name,
    cluster_name=cluster.name,
    namespace=addons.namespace,
    service_accounts={
        TRAINING: config.service_account,
        DATA_PREPARE: config.data_prepare_service_account,
    },
    partition=config.cluster.partition,
    account_id=config.cluster.account_id,
    bucket=storage.bucket,
    bucket_key_arn=storage.key_arn,
    repository_arn=registry.repository_arn,
    k8s_provider=addons.provider,
    data_access=config.data_access,
)
serving = Serving(
    name,
    cluster_name=cluster.name,
    namespace=addons.namespace,
    partition=config.cluster.partition,
    account_id=config.cluster.account_id,
    bucket=storage.bucket,
    bucket_key_arn=storage.key_arn,
    k8s_provider=addons.provider,
)
training_api = (
    TrainingApi(
        name,
        config.training_api,
        namespace=addons.namespace,
        cluster_name=cluster.name,
        partition=config.cluster.partition,
        account_id=config.cluster.account_id,
        bucket_arn=storage.bucket_arn,
        bucket_key_arn=storage.key_arn,
        storage_root=storage.root,
        repository_arn=registry.repository_arn,
        repository_url=registry.repository_url,
        k8s_provider=addons.provider,
        # The stack's own job settings (what `stack_defaults` writes for `launch`): the API's
        # jobs run on the stack's runtimes, in its queue, as its operator's kind.
        node_groups=tuple((g.name, g.instance.name, g.max_size) for g in config.gpu_node_groups),
        queue=kueue.local_queue if kueue else None,
        job_api=config.training_operator,
        grants=storage.bucket.apply(lambda b: published_grants(b, config.data_access)),
        ray_jobs=config.ray_jobs,
    )
    if config.training_api
    else None
)
shared_fs = (
    SharedFileSystem(
        name,
        config.fsx,
        vpc_id=network.vpc_id,
        subnet_id=network.gpu_subnet_id,
        client_security_group_id=cluster.security_group_id,
        bucket=storage.bucket,
        bucket_arn=storage.bucket_arn,
        kms_key_arn=storage.key_arn,
        kms_key_id=storage.key_id,
        account=KeyOwner(config.cluster.partition, config.cluster.account_id, config.region),
        protection=config.protection,
        namespace=addons.namespace,
        k8s_provider=addons.provider,
    )
    if config.fsx
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
    # Container logs of the namespace, kept after pods go (`trainstack logs` reads them).
    "container_log_group": container_logs.log_group,
    "service_account": identity.service_account,
    "training_role_arn": identity.role_arn,
    "data_prepare_service_account": identity.service_accounts[DATA_PREPARE],
    "data_prepare_role_arn": identity.role_arns[DATA_PREPARE],
    # serve-model binds it to each served run's ServiceAccount (infra/serving.py).
    "serving_role_arn": serving.role_arn,
    # What each pod role may read or write (infra/bucket_layout.py); stack files carry it so
    # jobs refuse at launch a URL their pods could not reach.
    "s3_grants": storage.bucket.apply(lambda b: published_grants(b, config.data_access)),
    "gpu_node_groups": [group_summary(g) for g in config.gpu_node_groups],
    "gpu_hourly_usd_idle": hourly_usd(config.gpu_node_groups, idle=True),
    "gpu_hourly_usd_at_max": hourly_usd(config.gpu_node_groups),
    "fsx_claim": shared_fs.claim_name if shared_fs else None,
    "image_build_project": image_build.project_name if image_build else None,
    "deploy_project_name": deploy.project_name if deploy else None,
    "pull_request_build_project": image_build.pull_request_project_name if image_build else None,
    "cache_repository_url": registry.cache_repository_url,
    "github_preview_role_arn": image_build.github.preview_role_arn if image_build else None,
    "github_build_role_arn": image_build.github.build_role_arn if image_build else None,
    # AWS_DEV_DEPLOY_ROLE_ARN / AWS_PROD_DEPLOY_ROLE_ARN: the role of this stack's deploy job.
    "github_deploy_role_arn": github_deploy.role_arn if github_deploy else None,
    # Deploys set both (images/deploy.sh); a rollback moves `image` back to `last_good_image`.
    "training_api_service": training_api.service_name if training_api else None,
    "image": config.image,
    "last_good_image": config.last_good_image,
    "local_queue": kueue.local_queue if kueue else None,
    # Which training operator the cluster runs: jobs default to its API (job.api).
    "job_api": config.training_operator,
    # Every job kind the cluster serves: the training operator's, and `rayjob` with KubeRay.
    "job_kinds": installed_job_kinds(config.training_operator, ray_jobs=config.ray_jobs),
    "training_runtimes": trainer.runtime_names if trainer else [],
}
for key, value in outputs.items():
    pulumi.export(key, value)
