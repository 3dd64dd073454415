"""Every setting of a stack, read and validated here before any resource is declared.

Pulumi hands the program each `trainstack:<key>` as a string (structured values from the stack
file arrive as JSON). `parse_stack_config` turns that flat map into typed dataclasses and stops
at the first bad value with one `ConfigError` naming the key, e.g.
`trainstack:gpuNodeGroups[0].instanceType`, and what is allowed. Each default lives here once.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

import pulumi
from pulumi.runtime.config import CONFIG, get_config_env

from catalog import INSTANCE_TYPES
from infra.bucket_layout import ACCESS_LEVELS, READ, Grant
from infra.ci_policies import GITHUB_OIDC_HOST
from infra.policies import RESERVED_PREFIXES
from infra.settings.operations import CONNECTION_ARN as _CONNECTION_ARN
from infra.settings.operations import GITHUB_URL as _GITHUB_URL
from infra.settings.operations import (
    capacity_block_end,
    parse_autoscaler,
    parse_deploy,
    parse_protection,
    parse_training_api,
    policy_arns,
)
from infra.settings.reader import NAMESPACE, ConfigError, SettingsReader, fail
from infra.settings.types import (
    SYSTEM_FLAVOR,
    CiConfig,
    ClusterConfig,
    FsxConfig,
    GpuNodeGroupConfig,
    KueueConfig,
    NetworkConfig,
    StackConfig,
    SystemNodeGroupConfig,
)
from infra.settings.versions import KUBERNETES_VERSION, VPC_CNI_VERSION
from jobs.backends.kubernetes.client.kinds import KINDS, RAYJOB, JobKind

__all__ = ["ConfigError", "load_stack_config", "parse_stack_config"]


CLUSTER_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
FSX_THROUGHPUTS_PER_TIB = (125, 250, 500, 1000)
"""MB/s per TiB that PERSISTENT_2 file systems offer."""
FSX_MIN_GIB = 1200
FSX_STEP_GIB = 2400
MIN_KUBERNETES_MINOR = 34
"""Older minors are past EKS standard support (2026-11): a new cluster would bill extended
support or be upgraded at once."""
NAT_LAYOUTS = ("perZone", "single")
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
    2922, 3288, 3653,
)  # fmt: skip
"""The values CloudWatch Logs' PutRetentionPolicy accepts."""
MIN_VPC_CNI = (1, 19, 0)
"""First VPC CNI release that leaves `efa-only` interfaces (cards > 0) alone."""

_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_GROUP_NAME = re.compile(r"^[a-z][-a-z0-9]{0,30}$")
_CNI_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-eksbuild\.\d+$")
_K8S_VERSION = re.compile(r"^1\.(\d{2})$")
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[\w-]+:\d{12}:key/[0-9a-f-]{36}$")
_SCHEDULE = re.compile(r"^(cron|rate)\(.+\)$")
_GITHUB_OIDC_PROVIDER = re.compile(
    rf"^arn:aws[a-z-]*:iam::\d{{12}}:oidc-provider/{re.escape(GITHUB_OIDC_HOST)}$"
)
_PINNED_IMAGE = re.compile(r"^[\w.-]+(:\d+)?/(?P<repository>[^@:]+)@sha256:[0-9a-f]{64}$")


TOP_LEVEL_KEYS = (
    "clusterName",
    "kubernetesVersion",
    "adminRoleArn",
    "vpcCidr",
    "availabilityZones",
    "gpuAvailabilityZone",
    "natGateways",
    "publicAccessCidrs",
    "clusterLogTypes",
    "vpcCniVersion",
    "logRetentionDays",
    "systemNodeGroup",
    "gpuNodeGroups",
    "repositoryName",
    "untaggedImageDays",
    "fsx",
    "ci",
    "image",
    "lastGoodImage",
    "namespace",
    "serviceAccount",
    "protectData",
    "kmsDeletionWindowDays",
    "autoscaler",
    "deploy",
    "runsKmsKeyArn",
    "kueue",
    "trainingApi",
    "trainingOperator",
    "rayJobs",
    "dataAccess",
    "dataPrepareServiceAccount",
)


def training_operators(kinds: Mapping[str, JobKind]) -> tuple[str, ...]:
    """The job kinds the kubernetes backend submits (followed), less RayJob whether it is
    followed or not: KubeRay is no training operator (`trainstack:rayJobs` installs it beside
    whichever `trainstack:trainingOperator` names)."""
    return tuple(api for api, kind in kinds.items() if kind.followed and api != RAYJOB.api)


TRAINING_OPERATORS = training_operators(KINDS)
"""`trainstack:trainingOperator`, named after the job API each operator serves."""
DATA_ACCESS_KEYS = ("bucket", "prefix", "access", "kmsKeyArn")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_KEY_PREFIX = re.compile(r"^[\w.=-]+(/[\w.=-]+)*$")
KUEUE_KEYS = ("enabled", "clusterQueue", "localQueue", "priorityClasses", "systemQuota")
SYSTEM_QUOTA_KEYS = ("cpu", "memoryGiB")
DEFAULT_PRIORITY_CLASSES = (("high", 1000), ("default", 100), ("low", 10))
GPU_GROUP_KEYS = (
    "name",
    "instanceType",
    "minSize",
    "desiredSize",
    "maxSize",
    "rootVolumeGiB",
    "capacityReservationId",
    "capacityBlock",
    "capacityBlockEnd",
    "spot",
    "placementGroup",
)
SYSTEM_GROUP_KEYS = ("instanceType", "minSize", "desiredSize", "maxSize", "rootVolumeGiB")
FSX_KEYS = ("storageCapacityGiB", "throughputPerTiB", "dataPrefix")
CI_KEYS = (
    "githubUrl",
    "branch",
    "nightlySchedule",
    "connectionArn",
    "pullRequestActorIds",
    "githubOidcProviderArn",
    "deployPolicyArns",
    "releaseEnvironment",
)


def _sizes(
    reader: SettingsReader, default_min: int = 0, default_max: int = 1
) -> tuple[int, int, int]:
    low = reader.get_int("minSize", default_min)
    desired = reader.get_int("desiredSize", low)
    high = reader.get_int("maxSize", max(desired, default_max), minimum=1)
    rule = f"need minSize <= desiredSize <= maxSize, got {low} / {desired} / {high}"
    if high < low:
        raise fail(reader.key("maxSize"), f"{high} is below minSize {low}; {rule}")
    if low > desired:
        raise fail(reader.key("minSize"), rule)
    if desired > high:
        raise fail(reader.key("desiredSize"), rule)
    return low, desired, high


def _cidr(key: str, value: str) -> str:
    try:
        return str(ipaddress.IPv4Network(value, strict=True))
    except ValueError as exc:
        raise fail(key, f"not an IPv4 CIDR block ({exc})") from None


def _parse_gpu_group(index: int, item: Any) -> GpuNodeGroupConfig:
    prefix = f"{NAMESPACE}:gpuNodeGroups[{index}]."
    if not isinstance(item, dict):
        raise fail(prefix.rstrip("."), f"expected an object, got {item!r}")
    reader = SettingsReader(item, prefix, GPU_GROUP_KEYS)
    name = reader.get_str("name", required=True)
    if not _GROUP_NAME.match(name):
        raise fail(reader.key("name"), f"{name!r} must be lowercase letters, digits, '-' (<=31)")
    type_name = reader.get_str("instanceType", required=True)
    if type_name not in INSTANCE_TYPES:
        raise fail(
            reader.key("instanceType"),
            f"unknown instance type {type_name!r}; allowed: {', '.join(sorted(INSTANCE_TYPES))}",
        )
    low, desired, high = _sizes(reader)
    reservation = reader.get_str("capacityReservationId")
    if reservation is not None and not _RESERVATION_ID.match(reservation):
        raise fail(reader.key("capacityReservationId"), f"{reservation!r} is not cr-<hex id>")
    capacity_block = reader.get_bool("capacityBlock", False)
    spot = reader.get_bool("spot", False)
    if capacity_block and reservation is None:
        raise fail(reader.key("capacityBlock"), "needs capacityReservationId (the block's id)")
    block_end = capacity_block_end(reader, capacity_block)
    if spot and reservation is not None:
        raise fail(reader.key("spot"), "spot cannot use a capacity reservation or block")
    return GpuNodeGroupConfig(
        name=name,
        instance=INSTANCE_TYPES[type_name],
        min_size=low,
        desired_size=desired,
        max_size=high,
        root_volume_gib=reader.get_int("rootVolumeGiB", 500, minimum=100),
        capacity_reservation_id=reservation,
        capacity_block=capacity_block,
        capacity_block_end=block_end,
        spot=spot,
        placement_group=reader.get_bool("placementGroup", reservation is None),
    )


def _parse_system_nodes(reader: SettingsReader) -> SystemNodeGroupConfig:
    values = reader.get_object("systemNodeGroup") or {}
    system = SettingsReader(values, f"{NAMESPACE}:systemNodeGroup.", SYSTEM_GROUP_KEYS)
    # Operators (training operator, CoreDNS) need a node at all times.
    low, desired, high = _sizes(system, default_min=2, default_max=3)
    instance_type = system.get_str("instanceType", "m6i.xlarge")
    if not re.match(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", instance_type):
        raise fail(system.key("instanceType"), f"{instance_type!r} is not an EC2 instance type")
    return SystemNodeGroupConfig(
        instance_type, low, desired, high, system.get_int("rootVolumeGiB", 100, minimum=20)
    )


def _parse_gpu_groups(reader: SettingsReader) -> tuple[GpuNodeGroupConfig, ...]:
    items = reader.raw("gpuNodeGroups")
    if not isinstance(items, list) or not items:
        raise fail(reader.key("gpuNodeGroups"), "required: a non-empty list of GPU node groups")
    groups = tuple(_parse_gpu_group(i, item) for i, item in enumerate(items))
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise fail(reader.key("gpuNodeGroups"), f"names must be unique, got {names}")
    if SYSTEM_FLAVOR in names:
        index = names.index(SYSTEM_FLAVOR)
        raise fail(
            f"{NAMESPACE}:gpuNodeGroups[{index}].name",
            f"{SYSTEM_FLAVOR!r} is the system nodes' Kueue flavor; pick another name",
        )
    return groups


def _parse_fsx(reader: SettingsReader) -> FsxConfig | None:
    values = reader.get_object("fsx")
    if values is None:
        return None
    fsx = SettingsReader(values, f"{NAMESPACE}:fsx.", FSX_KEYS)
    capacity = fsx.get_int("storageCapacityGiB", FSX_MIN_GIB, minimum=FSX_MIN_GIB)
    if capacity != FSX_MIN_GIB and capacity % FSX_STEP_GIB:
        raise fail(
            fsx.key("storageCapacityGiB"),
            f"{capacity} is not a PERSISTENT_2 size; allowed: {FSX_MIN_GIB} or a multiple of "
            f"{FSX_STEP_GIB}",
        )
    throughput = fsx.get_int("throughputPerTiB", 250)
    if throughput not in FSX_THROUGHPUTS_PER_TIB:
        raise fail(
            fsx.key("throughputPerTiB"),
            f"{throughput} not allowed; allowed: {', '.join(map(str, FSX_THROUGHPUTS_PER_TIB))}",
        )
    prefix = fsx.get_str("dataPrefix", "datasets").strip("/")
    # The file system imports and exports (deletions too) everything under its prefix.
    if not re.match(r"^[\w.-]+(/[\w.-]+)*$", prefix) or prefix.split("/")[0] in RESERVED_PREFIXES:
        others = " and ".join(f"{p}/" for p in RESERVED_PREFIXES)
        raise fail(fsx.key("dataPrefix"), f"{prefix!r}: a bucket prefix other than {others}")
    return FsxConfig(capacity, throughput, prefix)


def _parse_data_access(reader: SettingsReader) -> tuple[Grant, ...]:
    """`trainstack:dataAccess`: extra buckets or prefixes both pod roles may read (or write)."""
    items = reader.raw("dataAccess")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise fail(reader.key("dataAccess"), "expected a list of {bucket, prefix, access}")
    grants = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise fail(f"{reader.key('dataAccess')}[{index}]", "expected {bucket, prefix, access}")
        entry = SettingsReader(item, f"{reader.key('dataAccess')}[{index}].", DATA_ACCESS_KEYS)
        bucket = entry.get_str("bucket", required=True)
        if not _BUCKET_NAME.match(bucket):
            raise fail(entry.key("bucket"), f"{bucket!r} is not an S3 bucket name")
        prefix = entry.get_str("prefix", "").strip("/")
        if "*" in prefix or (prefix and not _KEY_PREFIX.match(prefix)):
            raise fail(entry.key("prefix"), f"{prefix!r}: a key prefix (no wildcards), or empty")
        access = entry.get_str("access", READ)
        if access not in ACCESS_LEVELS:
            raise fail(entry.key("access"), f"{access!r}; allowed: {', '.join(ACCESS_LEVELS)}")
        key = entry.get_str("kmsKeyArn")
        if key is not None and not _KMS_KEY_ARN.match(key):
            raise fail(entry.key("kmsKeyArn"), f"{key!r} is not a KMS key ARN")
        grants.append(Grant(bucket, prefix, access, key))
    return tuple(grants)


def _parse_ci(reader: SettingsReader) -> CiConfig | None:
    values = reader.get_object("ci")
    if values is None:
        return None
    ci = SettingsReader(values, f"{NAMESPACE}:ci.", CI_KEYS)
    url = ci.get_str("githubUrl", required=True)
    if not _GITHUB_URL.match(url):
        raise fail(ci.key("githubUrl"), f"{url!r} is not https://github.com/<owner>/<repo>")
    schedule = ci.get_str("nightlySchedule", "cron(0 3 * * ? *)")
    if not _SCHEDULE.match(schedule):
        raise fail(ci.key("nightlySchedule"), f"{schedule!r}: expected cron(...) or rate(...)")
    connection = ci.get_str("connectionArn")
    if connection is not None and not _CONNECTION_ARN.match(connection):
        raise fail(ci.key("connectionArn"), f"{connection!r} is not a CodeConnections ARN")
    actors = tuple(str(a) for a in ci.get_list("pullRequestActorIds"))
    for index, actor in enumerate(actors):
        if not actor.isdigit():
            key = f"{ci.key('pullRequestActorIds')}[{index}]"
            raise fail(key, f"{actor!r}: a numeric GitHub account id (api.github.com/users/NAME)")
    provider = ci.get_str("githubOidcProviderArn")
    if provider is not None and not _GITHUB_OIDC_PROVIDER.match(provider):
        raise fail(
            ci.key("githubOidcProviderArn"),
            f"{provider!r} is not arn:aws:iam::<account>:oidc-provider/{GITHUB_OIDC_HOST}",
        )
    return CiConfig(
        url,
        ci.get_str("branch", "main"),
        schedule,
        connection,
        actors,
        provider,
        deploy_policy_arns=policy_arns(ci, "deployPolicyArns"),
        release_environment=_github_environment(ci, "releaseEnvironment", "release"),
    )


def _github_environment(reader: SettingsReader, key: str, default: str) -> str:
    name = reader.get_str(key, default)
    # An OIDC `sub` claim is matched with StringLike: no wildcard may widen it.
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,255}", name):
        raise fail(reader.key(key), f"{name!r}: a GitHub environment name (letters, digits, . _ -)")
    return name


def _parse_image(reader: SettingsReader, key: str, repository: str) -> str | None:
    """A deployed image: `<registry>/<repository>@sha256:<digest>`, never a tag."""
    image = reader.get_str(key)
    if image is None:
        return None
    match = _PINNED_IMAGE.match(image)
    if not match or match["repository"] != repository:
        raise fail(reader.key(key), f"{image!r}: expected <registry>/{repository}@sha256:<digest>")
    return image


def _parse_kueue(reader: SettingsReader) -> KueueConfig | None:
    values = reader.get_object("kueue") or {}
    kueue = SettingsReader(values, f"{NAMESPACE}:kueue.", KUEUE_KEYS)
    if not kueue.get_bool("enabled", True):
        return None
    names = {}
    for key, default in (("clusterQueue", "trainstack"), ("localQueue", "training")):
        names[key] = kueue.get_str(key, default)
        if not _DNS_LABEL.match(names[key]):
            raise fail(kueue.key(key), f"{names[key]!r} is not a DNS-1123 label")
    quota = SettingsReader(
        kueue.get_object("systemQuota") or {}, f"{kueue.key('systemQuota')}.", SYSTEM_QUOTA_KEYS
    )
    system = (quota.get_int("cpu", 4, minimum=1), quota.get_int("memoryGiB", 16, minimum=1))
    classes = kueue.raw("priorityClasses")
    if classes is None:
        return KueueConfig(
            names["clusterQueue"], names["localQueue"], DEFAULT_PRIORITY_CLASSES, *system
        )
    if not isinstance(classes, dict) or not classes:
        raise fail(kueue.key("priorityClasses"), f"expected {{name: value}}, got {classes!r}")
    parsed = []
    for name, value in classes.items():
        key = f"{kueue.key('priorityClasses')}.{name}"
        if not _DNS_LABEL.match(str(name)):
            raise fail(key, f"{name!r} is not a DNS-1123 label")
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(key, f"expected a whole number (higher preempts lower), got {value!r}")
        parsed.append((str(name), value))
    return KueueConfig(names["clusterQueue"], names["localQueue"], tuple(parsed), *system)


def _parse_cluster(reader: SettingsReader, stack: str) -> ClusterConfig:
    name = reader.get_str("clusterName", f"trainstack-{stack}")
    # Resource names (IAM roles <= 64, S3 buckets lowercase) are derived from it.
    if not re.match(r"^[a-z][-a-z0-9]{0,30}[a-z0-9]$", name):
        raise fail(
            reader.key("clusterName"), f"{name!r}: lowercase letters, digits, '-' (2-32 chars)"
        )
    version = reader.get_str("kubernetesVersion", KUBERNETES_VERSION)
    match = _K8S_VERSION.match(version)
    if not match or int(match.group(1)) < MIN_KUBERNETES_MINOR:
        raise fail(
            reader.key("kubernetesVersion"),
            f"{version!r}: expected 1.NN, at least 1.{MIN_KUBERNETES_MINOR} (in EKS standard "
            f"support), e.g. {KUBERNETES_VERSION}",
        )
    admin = reader.get_str("adminRoleArn", required=True)
    if not _ROLE_ARN.match(admin):
        raise fail(
            reader.key("adminRoleArn"), f"{admin!r} is not arn:aws:iam::<account>:role/<name>"
        )
    cidrs = tuple(
        _cidr(f"{reader.key('publicAccessCidrs')}[{i}]", c)
        for i, c in enumerate(reader.get_list("publicAccessCidrs"))
    )
    if "0.0.0.0/0" in cidrs:
        raise fail(
            reader.key("publicAccessCidrs"), "0.0.0.0/0 opens the API to the world; list CIDRs"
        )
    log_types = reader.get_list("clusterLogTypes", CLUSTER_LOG_TYPES)
    for i, log_type in enumerate(log_types):
        if log_type not in CLUSTER_LOG_TYPES:
            raise fail(
                f"{reader.key('clusterLogTypes')}[{i}]",
                f"{log_type!r} unknown; allowed: {', '.join(CLUSTER_LOG_TYPES)}",
            )
    cni = reader.get_str("vpcCniVersion", VPC_CNI_VERSION)
    match = _CNI_VERSION.match(cni)
    if not match or tuple(int(g) for g in match.groups()) < MIN_VPC_CNI:
        raise fail(
            reader.key("vpcCniVersion"),
            f"{cni!r}: need vX.Y.Z-eksbuild.N at least v{'.'.join(map(str, MIN_VPC_CNI))} "
            "(efa-only interfaces)",
        )
    return ClusterConfig(
        name=name,
        kubernetes_version=version,
        admin_role_arn=admin,
        public_access_cidrs=cidrs,
        log_types=log_types,
        vpc_cni_version=cni,
        log_retention_days=_log_retention_days(reader),
    )


def _log_retention_days(reader: SettingsReader) -> int:
    days = reader.get_int("logRetentionDays", 30, minimum=1)
    if days not in LOG_RETENTION_DAYS:
        raise fail(
            reader.key("logRetentionDays"),
            f"{days} is not a CloudWatch Logs retention; allowed: "
            + ", ".join(map(str, LOG_RETENTION_DAYS)),
        )
    return days


def _parse_network(reader: SettingsReader, region: str) -> NetworkConfig:
    vpc_cidr = _cidr(reader.key("vpcCidr"), reader.get_str("vpcCidr", "10.0.0.0/16"))
    if ipaddress.IPv4Network(vpc_cidr).prefixlen > 20:
        raise fail(reader.key("vpcCidr"), f"{vpc_cidr} is too small; use /20 or larger")
    zones = reader.get_list("availabilityZones")
    if not 2 <= len(set(zones)) == len(zones) <= 7:
        raise fail(reader.key("availabilityZones"), f"need 2 to 7 distinct AZs, got {list(zones)}")
    for zone in zones:
        if not zone.startswith(region):
            raise fail(reader.key("availabilityZones"), f"{zone!r} is not in region {region}")
    gpu_zone = reader.get_str("gpuAvailabilityZone", zones[0])
    if gpu_zone not in zones:
        raise fail(
            reader.key("gpuAvailabilityZone"),
            f"{gpu_zone!r} not in availabilityZones; allowed: {', '.join(zones)}",
        )
    nat = reader.get_str("natGateways", "perZone")
    if nat not in NAT_LAYOUTS:
        raise fail(reader.key("natGateways"), f"{nat!r}; allowed: {', '.join(NAT_LAYOUTS)}")
    return NetworkConfig(vpc_cidr, zones, gpu_zone, nat_per_zone=nat == "perZone")


def parse_stack_config(values: Mapping[str, Any], stack: str, region: str | None) -> StackConfig:
    """`values` maps keys without the `trainstack:` prefix to their raw config values."""
    if not region:
        raise fail("aws:region", "required; e.g. `pulumi config set aws:region us-east-1`")
    reader = SettingsReader(values, f"{NAMESPACE}:", TOP_LEVEL_KEYS)
    network = _parse_network(reader, region)
    cluster = _parse_cluster(reader, stack)
    system_nodes = _parse_system_nodes(reader)
    gpu_node_groups = _parse_gpu_groups(reader)
    repository = reader.get_str("repositoryName", "trainstack/trainer")
    if not _REPOSITORY.match(repository):
        raise fail(reader.key("repositoryName"), f"{repository!r} is not an ECR repository name")
    namespace = reader.get_str("namespace", "training")
    service_account = reader.get_str("serviceAccount", "trainer")
    prepare_account = reader.get_str("dataPrepareServiceAccount", "data-prepare")
    for key, value in (
        ("namespace", namespace),
        ("serviceAccount", service_account),
        ("dataPrepareServiceAccount", prepare_account),
    ):
        if not _DNS_LABEL.match(value):
            raise fail(reader.key(key), f"{value!r} is not a DNS-1123 label")
    if prepare_account == service_account:
        raise fail(
            reader.key("dataPrepareServiceAccount"),
            f"{prepare_account!r} is trainstack:serviceAccount too; each pod role needs its own",
        )

    runs_key = reader.get_str("runsKmsKeyArn")
    if runs_key is not None and not _KMS_KEY_ARN.match(runs_key):
        raise fail(reader.key("runsKmsKeyArn"), f"{runs_key!r} is not a KMS key ARN")
    fsx = _parse_fsx(reader)
    if fsx is not None and runs_key is not None:
        # The FSx S3-access role is named after the file system, so no policy written before
        # `pulumi up` can name it, and this stack does not own the external key's policy.
        raise fail(
            reader.key("fsx"),
            "links the runs bucket, whose external key (trainstack:runsKmsKeyArn) this stack "
            "cannot grant to FSx's S3-access role; drop runsKmsKeyArn (the stack's own key gets "
            "the statement) or fsx",
        )
    return StackConfig(
        stack=stack,
        region=region,
        network=network,
        cluster=cluster,
        system_nodes=system_nodes,
        gpu_node_groups=gpu_node_groups,
        repository_name=repository,
        untagged_image_days=reader.get_int("untaggedImageDays", 7, minimum=1),
        fsx=fsx,
        runs_kms_key_arn=runs_key,
        ci=_parse_ci(reader),
        namespace=namespace,
        image=_parse_image(reader, "image", repository),
        last_good_image=_parse_image(reader, "lastGoodImage", repository),
        service_account=service_account,
        data_prepare_service_account=prepare_account,
        data_access=_parse_data_access(reader),
        protection=parse_protection(reader),
        autoscaler=parse_autoscaler(reader),
        deploy=parse_deploy(reader, cluster),
        kueue=_parse_kueue(reader),
        training_api=parse_training_api(reader, _PINNED_IMAGE, repository),
        training_operator=_parse_training_operator(reader),
        ray_jobs=reader.get_bool("rayJobs", True),
    )


def _parse_training_operator(reader: SettingsReader) -> str:
    operator = reader.get_str("trainingOperator", "trainjob")
    if operator not in TRAINING_OPERATORS:
        raise fail(
            reader.key("trainingOperator"),
            f"{operator!r} is not allowed; allowed: {', '.join(TRAINING_OPERATORS)}",
        )
    return operator


def load_stack_config() -> StackConfig:
    """Read this stack's `trainstack:*` settings (and `aws:region`) from the Pulumi runtime."""
    every_key = {**get_config_env(), **CONFIG.get()}
    config = pulumi.Config(NAMESPACE)
    values = {
        key.split(":", 1)[1]: config.get(key.split(":", 1)[1])
        for key in every_key
        if key.startswith(f"{NAMESPACE}:")
    }
    region = pulumi.Config("aws").get("region")
    return parse_stack_config(values, pulumi.get_stack(), region)
