"""The roles the deploy workflow's dev and prod jobs assume (infra/github_deploy.py), under
Pulumi's mocks: whom each trusts, and that each may touch only its own stack's resources."""

from __future__ import annotations

import json

import pytest

from infra.settings.stack import ConfigError, parse_stack_config
from tests.infra.pulumi_harness import StackRun, run_program, stack_file_config

SUB = "token.actions.githubusercontent.com:sub"
AUD = "token.actions.githubusercontent.com:aud"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ACCESS = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"


def one(run: StackRun, type_: str, name: str):
    (found,) = [r for r in run.of_type(type_) if r.name == name]
    return found


def deployer(run: StackRun, stack: str):
    return one(run, "aws:iam/role:Role", f"trainstack-{stack}-gha-deployer")


def granted(run: StackRun, stack: str) -> dict[str, dict]:
    policy = one(run, "aws:iam/rolePolicy:RolePolicy", f"trainstack-{stack}-gha-deployer-inline")
    return {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}


def release_repository_arn(run: StackRun, stack: str) -> str:
    return one(run, "aws:ecr/repository:Repository", f"trainstack-{stack}-trainer").state["arn"]


@pytest.mark.parametrize(("stack", "environment"), [("dev", "development"), ("prod", "production")])
def test_each_stacks_deploy_role_trusts_its_environment_of_the_repository_only(
    stack_runs, stack, environment
):
    run = stack_runs[stack]
    role = deployer(run, stack)
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    provider = run.one("aws:iam/openIdConnectProvider:OpenIdConnectProvider").state["arn"]
    assert statement["Principal"] == {"Federated": provider}
    assert statement["Condition"] == {
        "StringEquals": {AUD: "sts.amazonaws.com"},
        # No branch, no other environment, no wildcard: a job in the other environment (or a
        # pull request) gets no token this role accepts.
        "StringLike": {SUB: [f"repo:example-org/trainstack:environment:{environment}"]},
    }
    assert run.outputs["github_deploy_role_arn"] == role.state["arn"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_scan_gate_reads_the_release_repository_only(stack_runs, stack):
    run = stack_runs[stack]
    gate = granted(run, stack)["ScanGate"]
    assert sorted(gate["Action"]) == [
        "ecr:BatchGetImage",
        "ecr:DescribeImageScanFindings",
        "ecr:DescribeImages",
    ]
    assert gate["Resource"] == release_repository_arn(run, stack)  # not the cache, not "*"


def test_prod_deploy_role_only_starts_and_follows_the_deploy_project(stack_runs):
    run = stack_runs["prod"]
    project = one(run, "aws:codebuild/project:Project", "trainstack-prod-deploy")
    logs = one(run, "aws:cloudwatch/logGroup:LogGroup", "trainstack-prod-deploy-logs")
    statements = granted(run, "prod")
    assert set(statements) == {
        "ScanGate", "DeployProject", "FollowDeployLogs", "NoBuildspecOverride"}  # fmt: skip
    assert statements["DeployProject"]["Action"] == [
        "codebuild:BatchGetBuilds",
        "codebuild:StartBuild",
    ]
    assert statements["DeployProject"]["Resource"] == project.state["arn"]
    assert statements["FollowDeployLogs"]["Action"] == "logs:GetLogEvents"
    arn = logs.state["arn"]
    assert statements["FollowDeployLogs"]["Resource"] == [arn, f"{arn}:*"]
    # Not `pulumi up`: no managed policy, no access to the cluster, nothing but those resources
    # (the project's own role does the deploy, in the VPC).
    role = deployer(run, "prod")
    assert not [a for a in run.of_type(ATTACHMENT) if a.inputs["role"] == role.state["name"]]
    assert not [a for a in run.of_type(ACCESS) if a.inputs["principalArn"] == role.state["arn"]]
    assert all(s["Resource"] != "*" for s in statements.values())
    # It starts the project's own buildspec only: a request carrying commands is denied.
    assert statements["NoBuildspecOverride"] == {
        "Sid": "NoBuildspecOverride",
        "Effect": "Deny",
        "Action": ["codebuild:StartBuild", "codebuild:StartBuildBatch"],
        "Resource": project.state["arn"],
        "Condition": {"Null": {"codebuild:source.buildspec": "false"}},
    }


def test_dev_deploy_role_runs_pulumi_up_with_its_policies_and_its_own_access_entry(stack_runs):
    run = stack_runs["dev"]
    role = deployer(run, "dev")
    attached = [a.inputs["policyArn"] for a in run.of_type(ATTACHMENT)
                if a.inputs["role"] == role.state["name"]]  # fmt: skip
    assert attached == stack_file_config("dev")["trainstack:ci"]["deployPolicyArns"]
    statements = granted(run, "dev")
    assert set(statements) == {"ScanGate", "ClusterEndpoint"}
    cluster = run.one("aws:eks/cluster:Cluster")
    assert statements["ClusterEndpoint"] == {
        "Sid": "ClusterEndpoint",
        "Effect": "Allow",
        "Action": "eks:DescribeCluster",
        "Resource": cluster.state["arn"],
    }
    access = one(run, ACCESS, "trainstack-dev-gha-deployer")
    assert access.inputs["principalArn"] == role.state["arn"]
    assert access.inputs["policyArn"].endswith("cluster-access-policy/AmazonEKSClusterAdminPolicy")
    assert access.inputs["accessScope"] == {"type": "cluster"}
    # `pulumi up` as this role reaches the cluster: the in-cluster resources wait for its entry.
    provider = run.one("pulumi:providers:kubernetes")
    assert access.urn in provider.opts.dependencies


def test_a_runner_deployed_stack_without_deploy_policies_has_no_deploy_role():
    config = stack_file_config("dev")
    config["trainstack:ci"] = {
        k: v for k, v in config["trainstack:ci"].items() if k != "deployPolicyArns"
    }
    run = run_program(config, "dev")
    assert not [r for r in run.of_type("aws:iam/role:Role") if r.name.endswith("-gha-deployer")]
    assert run.outputs["github_deploy_role_arn"] is None


def test_a_bad_deploy_policy_names_the_key():
    config = {k.removeprefix("trainstack:"): v for k, v in stack_file_config("dev").items()}
    config = {k: v for k, v in config.items() if not k.startswith("aws:")}
    config["ci"] = {**config["ci"], "deployPolicyArns": ["AdministratorAccess"]}
    with pytest.raises(ConfigError) as error:
        parse_stack_config(config, "dev", "us-east-1")
    assert "trainstack:ci.deployPolicyArns[0]" in str(error.value)
    assert "is not a policy ARN" in str(error.value)
