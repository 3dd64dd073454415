"""Container logs outlive pods (infra/container_logs.py): under the mocks, both example stacks
ship the training namespace to one log group with the stack's retention, through a pinned
Fluent Bit chart whose Pod Identity role may only write to that group."""

from __future__ import annotations

import json

import pytest

from infra.settings import versions
from tests.infra.iam_eval import allowed
from tests.infra.pulumi_harness import ACCOUNT, stack_file_config

LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
RELEASE = "kubernetes:helm.sh/v3:Release"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def container_group(run):
    (group,) = [g for g in run.of_type(LOG_GROUP) if g.name.endswith("-container-logs")]
    return group


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_log_group_has_the_stacks_retention_and_is_published(stack_runs, stack):
    run = stack_runs[stack]
    group = container_group(run)
    retention = int(stack_file_config(stack).get("trainstack:logRetentionDays", 30))
    assert group.inputs["retentionInDays"] == retention
    assert group.inputs["name"] == f"/aws/eks/{run.outputs['cluster_name']}/containers"
    assert run.outputs["container_log_group"] == group.inputs["name"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_fluent_bit_is_pinned_and_writes_only_the_training_namespace(stack_runs, stack):
    run = stack_runs[stack]
    (release,) = [r for r in run.of_type(RELEASE) if r.inputs["chart"] == "aws-for-fluent-bit"]
    assert release.inputs["version"] == versions.FLUENT_BIT["version"]
    assert release.inputs["repositoryOpts"]["repo"] == versions.FLUENT_BIT["repo"]
    values = release.inputs["values"]
    namespace = run.outputs["namespace"]
    assert values["input"]["path"] == f"/var/log/containers/*_{namespace}_*.log"
    output = values["cloudWatchLogs"]
    assert output["logGroupName"] == container_group(run).inputs["name"]
    assert output["autoCreateGroup"] is False  # the stack owns the group and its retention
    assert output["logStreamTemplate"].startswith("$kubernetes['pod_name'].")
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values[
        "tolerations"
    ]
    assert not values["cloudWatch"]["enabled"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_shipper_role_writes_only_its_log_group(stack_runs, stack):
    run = stack_runs[stack]
    group_arn = container_group(run).state["arn"]
    (policy,) = [p for p in run.of_type(ROLE_POLICY) if p.name.endswith("-fluent-bit-inline")]
    document = json.loads(policy.inputs["policy"])
    context = {"aws:ResourceAccount": ACCOUNT}
    stream = f"{group_arn}:log-stream:trainjob-master-0.pytorch"
    for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
        assert allowed([document], action, stream, context)
    other_group = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/eks/other/containers"
    assert not allowed([document], "logs:PutLogEvents", f"{other_group}:log-stream:x", context)
    assert not allowed([document], "logs:PutLogEvents", stream, {"aws:ResourceAccount": "999"})
    for action in ("logs:CreateLogGroup", "logs:PutRetentionPolicy", "logs:FilterLogEvents"):
        assert not allowed([document], action, group_arn, context)
    every_action = {a for s in document["Statement"] for a in s["Action"]}
    assert every_action == {"logs:CreateLogStream", "logs:PutLogEvents"}
    (association,) = [
        a for a in run.of_type(ASSOCIATION) if a.inputs["serviceAccount"] == "aws-for-fluent-bit"
    ]
    assert association.inputs["namespace"] == "kube-system"
    assert association.inputs["roleArn"].endswith("-fluent-bit")
