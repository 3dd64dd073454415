"""Every bad stack setting stops the program with one message naming the `trainstack:` key,
before any resource is declared."""

from __future__ import annotations

import copy
import re

import pytest

from infra.settings.stack import ConfigError, parse_stack_config
from tests.infra.pulumi_harness import RecordingMocks, run_program, stack_file_config


def group(**changes):
    return {"name": "gpu", "instanceType": "p5.48xlarge", "desiredSize": 1, "maxSize": 2, **changes}


PROD_DEPLOY = stack_file_config("prod")["trainstack:deploy"]
EXTERNAL_KEY = "arn:aws:kms:us-east-1:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"

# (what to change in the prod stack, key the error must name, words it must contain)
BAD_CONFIGS = {
    "unknown-instance-type": (
        {"trainstack:gpuNodeGroups": [group(instanceType="p9.96xlarge")]},
        "trainstack:gpuNodeGroups[0].instanceType",
        "allowed: g5.12xlarge, g5.48xlarge",
    ),
    "min-above-desired": (
        {"trainstack:gpuNodeGroups": [group(minSize=3, desiredSize=2, maxSize=4)]},
        "trainstack:gpuNodeGroups[0].minSize",
        "need minSize <= desiredSize <= maxSize, got 3 / 2 / 4",
    ),
    "desired-above-max": (
        {"trainstack:gpuNodeGroups": [group(desiredSize=5, maxSize=4)]},
        "trainstack:gpuNodeGroups[0].desiredSize",
        "got 0 / 5 / 4",
    ),
    "size-not-a-number": (
        {"trainstack:gpuNodeGroups": [group(maxSize="two")]},
        "trainstack:gpuNodeGroups[0].maxSize",
        "expected a whole number",
    ),
    "fsx-capacity": (
        {"trainstack:fsx": {"storageCapacityGiB": 3600}},
        "trainstack:fsx.storageCapacityGiB",
        "allowed: 1200 or a multiple of 2400",
    ),
    "fsx-throughput": (
        {"trainstack:fsx": {"throughputPerTiB": 300}},
        "trainstack:fsx.throughputPerTiB",
        "allowed: 125, 250, 500, 1000",
    ),
    "fsx-prefix-is-runs": (
        {"trainstack:fsx": {"dataPrefix": "runs"}},
        "trainstack:fsx.dataPrefix",
        "other than runs/",
    ),
    "fsx-prefix-is-build-artifacts": (
        {"trainstack:fsx": {"dataPrefix": "image-builds/nightly"}},
        "trainstack:fsx.dataPrefix",
        "other than runs/ and image-builds/",
    ),
    "missing-admin-role": (
        {"trainstack:adminRoleArn": None},
        "trainstack:adminRoleArn",
        "required",
    ),
    "admin-role-not-a-role": (
        {"trainstack:adminRoleArn": "arn:aws:iam::123456789012:user/alice"},
        "trainstack:adminRoleArn",
        "is not arn:aws:iam::<account>:role/<name>",
    ),
    "bad-public-cidr": (
        {"trainstack:publicAccessCidrs": ["198.51.100.0/33"]},
        "trainstack:publicAccessCidrs[0]",
        "not an IPv4 CIDR block",
    ),
    "world-open-endpoint": (
        {"trainstack:publicAccessCidrs": ["0.0.0.0/0"]},
        "trainstack:publicAccessCidrs",
        "opens the API to the world",
    ),
    "vpc-cidr-host-bits": (
        {"trainstack:vpcCidr": "10.0.0.1/16"},
        "trainstack:vpcCidr",
        "not an IPv4 CIDR block",
    ),
    "one-zone": (
        {"trainstack:availabilityZones": ["us-east-1a"]},
        "trainstack:availabilityZones",
        "need 2 to 7 distinct AZs",
    ),
    "zone-outside-region": (
        {"trainstack:availabilityZones": ["us-west-2a", "us-west-2b"]},
        "trainstack:availabilityZones",
        "not in region us-east-1",
    ),
    "gpu-zone-not-listed": (
        {"trainstack:gpuAvailabilityZone": "us-east-1f"},
        "trainstack:gpuAvailabilityZone",
        "allowed: us-east-1a, us-east-1b, us-east-1c",
    ),
    "typo-top-level": (
        {"trainstack:gpuNodeGroup": [group()]},
        "trainstack:gpuNodeGroup",
        "unknown setting; allowed:",
    ),
    "typo-in-group": (
        {"trainstack:gpuNodeGroups": [group(desired=1)]},
        "trainstack:gpuNodeGroups[0].desired",
        "unknown setting; allowed: capacityBlock",
    ),
    "block-without-reservation": (
        {"trainstack:gpuNodeGroups": [group(capacityBlock=True)]},
        "trainstack:gpuNodeGroups[0].capacityBlock",
        "needs capacityReservationId",
    ),
    "spot-with-reservation": (
        {
            "trainstack:gpuNodeGroups": [
                group(spot=True, capacityReservationId="cr-0123456789abcdef0")
            ]
        },
        "trainstack:gpuNodeGroups[0].spot",
        "cannot use a capacity reservation",
    ),
    "bad-reservation-id": (
        {"trainstack:gpuNodeGroups": [group(capacityReservationId="reservation-1")]},
        "trainstack:gpuNodeGroups[0].capacityReservationId",
        "is not cr-<hex id>",
    ),
    "duplicate-group-names": (
        {"trainstack:gpuNodeGroups": [group(), group()]},
        "trainstack:gpuNodeGroups",
        "names must be unique",
    ),
    "no-gpu-groups": (
        {"trainstack:gpuNodeGroups": []},
        "trainstack:gpuNodeGroups",
        "non-empty list",
    ),
    "old-vpc-cni": (
        {"trainstack:vpcCniVersion": "v1.16.0-eksbuild.1"},
        "trainstack:vpcCniVersion",
        "efa-only interfaces",
    ),
    "cluster-name-uppercase": (
        {"trainstack:clusterName": "Train_Stack"},
        "trainstack:clusterName",
        "lowercase letters, digits, '-'",
    ),
    "system-group-sizes": (
        {"trainstack:systemNodeGroup": {"minSize": 0, "desiredSize": 4, "maxSize": 3}},
        "trainstack:systemNodeGroup.desiredSize",
        "got 0 / 4 / 3",
    ),
    "system-instance-type": (
        {"trainstack:systemNodeGroup": {"instanceType": "xlarge"}},
        "trainstack:systemNodeGroup.instanceType",
        "is not an EC2 instance type",
    ),
    "missing-region": ({"aws:region": None}, "aws:region", "required"),
    "fsx-link-to-external-key": (
        {"trainstack:runsKmsKeyArn": EXTERNAL_KEY},
        "trainstack:fsx",
        "cannot grant to FSx's S3-access role",
    ),
    "runs-key-not-a-key": (
        {"trainstack:runsKmsKeyArn": "alias/runs"},
        "trainstack:runsKmsKeyArn",
        "is not a KMS key ARN",
    ),
    "max-below-min": (
        {"trainstack:gpuNodeGroups": [group(minSize=3, maxSize=2)]},
        "trainstack:gpuNodeGroups[0].maxSize",
        "2 is below minSize 3",
    ),
    "private-endpoint-without-in-vpc-deploy": (
        {"trainstack:deploy": None},
        "trainstack:deploy",
        "required when the API endpoint is private (no publicAccessCidrs)",
    ),
    "deploy-token-inline": (
        {"trainstack:deploy": {**PROD_DEPLOY, "pulumiTokenSecretArn": "pul-0123456789abcdef"}},
        "trainstack:deploy.pulumiTokenSecretArn",
        "the token itself never goes in config",
    ),
    "deploy-without-policies": (
        {"trainstack:deploy": {**PROD_DEPLOY, "policyArns": []}},
        "trainstack:deploy.policyArns",
        "required",
    ),
    "old-kubernetes": (
        {"trainstack:kubernetesVersion": "1.33"},
        "trainstack:kubernetesVersion",
        "at least 1.34",
    ),
    "kms-window-too-long": (
        {"trainstack:kmsDeletionWindowDays": 45},
        "trainstack:kmsDeletionWindowDays",
        "allowed: 7 to 30 days",
    ),
    "nat-layout": (
        {"trainstack:natGateways": "none"},
        "trainstack:natGateways",
        "allowed: perZone, single",
    ),
    "block-without-end": (
        {
            "trainstack:gpuNodeGroups": [
                group(capacityBlock=True, capacityReservationId="cr-0123456789abcdef0")
            ]
        },
        "trainstack:gpuNodeGroups[0].capacityBlockEnd",
        "required with capacityBlock",
    ),
    "block-end-not-utc": (
        {
            "trainstack:gpuNodeGroups": [
                group(
                    capacityBlock=True,
                    capacityReservationId="cr-0123456789abcdef0",
                    capacityBlockEnd="2026-12-01 11:30",
                )
            ]
        },
        "trainstack:gpuNodeGroups[0].capacityBlockEnd",
        "expected UTC like",
    ),
    "autoscaler-typo": (
        {"trainstack:autoscaler": {"provisioningRequest": True}},
        "trainstack:autoscaler.provisioningRequest",
        "unknown setting",
    ),
    "log-retention-not-cloudwatch": (
        {"trainstack:logRetentionDays": 31},
        "trainstack:logRetentionDays",
        "31 is not a CloudWatch Logs retention; allowed: 1, 3, 5, 7, 14, 30, 60, 90",
    ),
    "bad-github-url": (
        {"trainstack:ci": {"githubUrl": "git@github.com:org/repo.git"}},
        "trainstack:ci.githubUrl",
        "is not https://github.com/<owner>/<repo>",
    ),
}


def with_changes(changes: dict) -> dict:
    config = copy.deepcopy(stack_file_config("prod"))
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_fails_before_any_resource(case):
    changes, key, words = BAD_CONFIGS[case]
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(with_changes(changes), "bad", mocks)
    message = str(raised.value)
    assert message.startswith(f"{key}: "), message
    assert words in message, message
    assert "\n" not in message
    assert mocks.declared == []


def test_defaults_fill_a_minimal_stack():
    config = parse_stack_config(
        {
            "adminRoleArn": "arn:aws:iam::123456789012:role/admin",
            "availabilityZones": '["eu-west-1a", "eu-west-1b"]',
            "publicAccessCidrs": '["198.51.100.0/24"]',
            "gpuNodeGroups": '[{"name": "g5", "instanceType": "g5.48xlarge"}]',
        },
        stack="demo",
        region="eu-west-1",
    )
    assert config.cluster.name == "trainstack-demo"
    assert config.cluster.kubernetes_version == "1.35"
    assert config.cluster.public_access_cidrs == ("198.51.100.0/24",)
    assert config.deploy is None  # a public endpoint needs no in-VPC deploy
    assert config.protection.protect and config.protection.kms_deletion_window_days == 30
    assert config.network.nat_per_zone
    assert not config.autoscaler.provisioning_requests
    assert config.network.gpu_availability_zone == "eu-west-1a"
    (gpu,) = config.gpu_node_groups
    assert (gpu.min_size, gpu.desired_size, gpu.max_size) == (0, 0, 1)
    assert gpu.placement_group and gpu.capacity_type == "ON_DEMAND"
    assert (config.system_nodes.min_size, config.system_nodes.max_size) == (2, 3)
    assert config.fsx is None and config.ci is None
    assert (config.namespace, config.service_account) == ("training", "trainer")


def test_error_lists_every_catalog_type():
    from catalog import INSTANCE_TYPES

    with pytest.raises(ConfigError) as raised:
        parse_stack_config(
            {
                "adminRoleArn": "arn:aws:iam::123456789012:role/admin",
                "availabilityZones": '["eu-west-1a", "eu-west-1b"]',
                "gpuNodeGroups": '[{"name": "x", "instanceType": "m5.large"}]',
            },
            stack="demo",
            region="eu-west-1",
        )
    listed = re.search(r"allowed: (.*)$", str(raised.value)).group(1).split(", ")
    assert listed == sorted(INSTANCE_TYPES)
