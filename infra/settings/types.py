"""The typed settings of a stack: what `infra.settings.stack` produces and the components
consume."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from catalog import InstanceType
from infra.bucket_layout import Grant


@dataclass(frozen=True)
class NetworkConfig:
    vpc_cidr: str
    availability_zones: tuple[str, ...]
    """At least two: EKS needs subnets in two AZs."""
    gpu_availability_zone: str
    """The one AZ whose private subnet every GPU node group uses (EFA and placement groups
    don't span AZs)."""
    nat_per_zone: bool
    """A NAT gateway in every AZ (prod), else one, in the GPU AZ."""


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    kubernetes_version: str
    admin_role_arn: str
    """IAM role given cluster-admin through an EKS access entry."""
    public_access_cidrs: tuple[str, ...]
    """Empty: the API endpoint is private only."""
    log_types: tuple[str, ...]
    vpc_cni_version: str
    log_retention_days: int

    @property
    def partition(self) -> str:
        """aws, aws-cn or aws-us-gov: read off the admin role so no lookup is needed."""
        return self.admin_role_arn.split(":")[1]

    @property
    def account_id(self) -> str:
        """The stack's AWS account, read off the admin role (no lookup under mocks or preview)."""
        return self.admin_role_arn.split(":")[4]


@dataclass(frozen=True)
class SystemNodeGroupConfig:
    instance_type: str
    min_size: int
    desired_size: int
    max_size: int
    root_volume_gib: int


@dataclass(frozen=True)
class GpuNodeGroupConfig:
    name: str
    instance: InstanceType
    min_size: int
    desired_size: int
    max_size: int
    root_volume_gib: int
    capacity_reservation_id: str | None
    capacity_block: bool
    """The reservation is an EC2 Capacity Block for ML (market type `capacity-block`)."""
    capacity_block_end: datetime | None
    """When the Capacity Block ends (UTC); the group is scaled to zero before it."""
    spot: bool
    placement_group: bool
    """Launch into a `cluster` placement group; off by default when a reservation fixes
    placement."""

    @property
    def capacity_type(self) -> str:
        if self.capacity_block:
            return "CAPACITY_BLOCK"
        return "SPOT" if self.spot else "ON_DEMAND"


@dataclass(frozen=True)
class FsxConfig:
    storage_capacity_gib: int
    throughput_per_tib: int
    data_prefix: str
    """Bucket prefix linked into the file system at /<data_prefix> (import and export)."""


@dataclass(frozen=True)
class CiConfig:
    github_url: str
    branch: str
    nightly_schedule: str
    connection_arn: str | None
    """CodeConnections connection to GitHub: a reference, never a token in config."""
    pull_request_actor_ids: tuple[str, ...] = ()
    """Numeric GitHub account ids whose pull requests CodeBuild builds (on a project that cannot
    push); empty: pull requests are not built by CodeBuild at all."""
    github_oidc_provider_arn: str | None = None
    """The account's existing GitHub OIDC provider; None: the stack creates one."""
    deploy_policy_arns: tuple[str, ...] = ()
    """IAM policies for the AWS side of `pulumi up` when the deploy workflow's runner deploys
    this stack (no `deploy` section: public endpoint); empty: no runner deploy role."""
    release_environment: str = "release"
    """The protected GitHub environment whose jobs alone may start the release build (its OIDC
    `sub` is repo:OWNER/REPO:environment:NAME): branch and tag rules live on the environment."""


@dataclass(frozen=True)
class TrainingApiConfig:
    """The Training API in the cluster (`infra.training_api`): `trainstack serve`, 2 replicas."""

    image: str
    """`<registry>/<repositoryName>@sha256:<digest>`: the slim API image (images/api), kept in
    the trainer's repository under `api-*` tags."""
    token_hashes_secret_arn: str
    """Secrets Manager secret holding {"<name>": "<sha256 of a token>", ...}: a reference;
    neither tokens nor hashes go in config."""
    replicas: int = 2
    internal_load_balancer: bool = False
    """An internal NLB in front of the service (else ClusterIP only)."""
    certificate_arn: str | None = None
    """ACM certificate the internal NLB serves TLS with (the pod speaks HTTP behind it)."""
    tls_secret_name: str | None = None
    """A kubernetes.io/tls Secret in the namespace (e.g. cert-manager's): mounted, and the pod
    serves HTTPS itself (end to end, also inside the cluster). One of the two is required."""
    cpu: str = "500m"
    memory: str = "1Gi"
    admins: tuple[str, ...] = ()
    """Users (names in the token hashes secret) who may cancel or resume anyone's runs
    (`trainstack serve --admin`); each must have a token in the secret."""


@dataclass(frozen=True)
class DeployConfig:
    """The in-VPC deploy project (`infra.vpc_deploy`)."""

    github_url: str
    connection_arn: str | None
    """CodeConnections connection to GitHub: a reference, never a token in config."""
    pulumi_token_secret_arn: str
    """Secrets Manager secret or SSM SecureString parameter holding the Pulumi access token."""
    policy_arns: tuple[str, ...]
    """IAM policies for the AWS side of `pulumi up` (creating this stack's resources)."""
    timeout_minutes: int


@dataclass(frozen=True)
class AutoscalerConfig:
    scale_down_idle_minutes: int
    """A node idle this long is removed (and the group shrinks toward its minSize)."""
    provisioning_requests: bool
    """Serve ProvisioningRequests (Kueue's all-or-nothing scale-up for a gang)."""


@dataclass(frozen=True)
class DataProtection:
    protect: bool
    """`protect` and `retain_on_delete` on what holds data: the runs bucket, FSx and the KMS keys
    that decrypt them. On in prod; a throwaway dev stack turns it off to tear down in one go."""
    kms_deletion_window_days: int
    """Days a deleted KMS key can still be restored (7-30); everything it encrypted is lost
    after that."""


SYSTEM_FLAVOR = "system"
"""The Kueue ResourceFlavor of the system nodes (infra/kueue.py): no GPU node group may take it."""


@dataclass(frozen=True)
class KueueConfig:
    """Kueue's queues for the GPU node groups (see infra/kueue.py)."""

    cluster_queue: str
    local_queue: str
    """The LocalQueue in the training namespace: what `job.queue` names."""
    priority_classes: tuple[tuple[str, int], ...]
    """WorkloadPriorityClass name -> value (`job.priority`); higher preempts lower."""
    system_cpu: int = 4
    system_memory_gib: int = 16
    """The `system` flavor's quota (`trainstack:kueue.systemQuota`): what queued pods that ask
    for no GPU (a RayJob's head and submitter, CPU jobs) may hold on the system nodes."""


@dataclass(frozen=True)
class StackConfig:
    stack: str
    region: str
    network: NetworkConfig
    cluster: ClusterConfig
    system_nodes: SystemNodeGroupConfig
    gpu_node_groups: tuple[GpuNodeGroupConfig, ...]
    repository_name: str
    untagged_image_days: int
    fsx: FsxConfig | None
    runs_kms_key_arn: str | None
    """An existing KMS key for the runs bucket (its policy managed elsewhere); None: the stack
    creates and protects its own."""
    ci: CiConfig | None
    namespace: str
    service_account: str
    protection: DataProtection
    autoscaler: AutoscalerConfig
    deploy: DeployConfig | None
    image: str | None = None
    """The digest-pinned trainer image the stack's jobs run (set by each deploy)."""
    last_good_image: str | None = None
    """The last image whose smoke run passed on this stack: what a rollback returns to."""
    kueue: KueueConfig | None = None
    """None: `trainstack:kueue.enabled` is false (no Kueue, jobs go straight to the nodes)."""
    training_api: TrainingApiConfig | None = None
    """None: no Training API in this stack (`trainstack:trainingApi` unset)."""
    training_operator: str = "trainjob"
    """`trainstack:trainingOperator`: `trainjob` installs Kubeflow Trainer v2 (with JobSet) and
    trainstack's ClusterTrainingRuntimes; `pytorchjob` the Training Operator v1 (PyTorchJob).
    The stack output `job_api` says which, and jobs default to it."""
    ray_jobs: bool = True
    """`trainstack:rayJobs`: install the KubeRay operator and its CRDs (infra/kuberay.py), so
    runs may be RayJobs (`job.api=rayjob`): Kueue integrates them and the Training API's Role
    may submit them. The stack output `job_kinds` lists them beside `job_api`'s."""
    data_prepare_service_account: str = "data-prepare"
    data_access: tuple[Grant, ...] = ()
    """`trainstack:dataAccess`: buckets or prefixes beyond the layout, for both pod roles."""
