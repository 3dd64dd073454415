"""The typed settings of a stack: what `infra.config` produces and the components consume."""

from __future__ import annotations

from dataclasses import dataclass

from catalog import InstanceType


@dataclass(frozen=True)
class NetworkConfig:
    vpc_cidr: str
    availability_zones: tuple[str, ...]
    """At least two: EKS needs subnets in two AZs."""
    gpu_availability_zone: str
    """The one AZ whose private subnet every GPU node group uses (EFA and placement groups
    don't span AZs)."""


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


@dataclass(frozen=True)
class KueueConfig:
    """Kueue's queues for the GPU node groups (see infra/kueue.py)."""

    cluster_queue: str
    local_queue: str
    """The LocalQueue in the training namespace: what `job.queue` names."""
    priority_classes: tuple[tuple[str, int], ...]
    """WorkloadPriorityClass name -> value (`job.priority`); higher preempts lower."""


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
    ci: CiConfig | None
    namespace: str
    service_account: str
    kueue: KueueConfig | None = None
    """None: `trainstack:kueue.enabled` is false (no Kueue, jobs go straight to the nodes)."""
