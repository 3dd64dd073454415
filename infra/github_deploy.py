"""The role each stack's deploy job in .github/workflows/deploy.yml assumes through OIDC. A
stack's deploy path decides which job deploys it, and so the one GitHub environment its role
trusts (`repo:<owner>/<name>:environment:<env>`, nothing else):

- from the job's runner (no `trainstack:deploy`; the endpoint's public side admits
  `publicAccessCidrs`): the `dev` job, environment `development`. The role runs the scan gate,
  `pulumi up` (`ci.deployPolicyArns` for the AWS side, its own EKS access entry for the cluster
  side) and the smoke job.
- from inside the VPC (`trainstack:deploy`): the `prod` job, environment `production`. The role
  runs the scan gate and starts and follows the deploy project, nothing else: `pulumi up` runs
  with the project's role, in the VPC.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.ci_policies import github_trust_policy, in_vpc_deploy_policy, runner_deploy_policy
from infra.cluster import Cluster
from infra.github_oidc import repository_slug
from infra.settings.types import StackConfig
from infra.vpc_deploy import VpcDeploy, deploy_access

RUNNER_ENVIRONMENT = "development"
IN_VPC_ENVIRONMENT = "production"


def deploy_subjects(slug: str, environment: str) -> list[str]:
    return [f"repo:{slug}:environment:{environment}"]


class GithubDeployRole(pulumi.ComponentResource):
    role_arn: pulumi.Output[str]
    environment: str
    access_ready: list[pulumi.Resource]
    """The role can use the Kubernetes API once these exist (runner path only)."""

    def __init__(
        self,
        name: str,
        github_url: str,
        provider_arn: pulumi.Input[str],
        environment: str,
        policy: pulumi.Input[str],
        partition: str,
        policy_arns: tuple[str, ...] = (),
        cluster_name: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:GithubDeployRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        subjects = deploy_subjects(repository_slug(github_url), environment)
        role = aws.iam.Role(
            f"{name}-deployer",
            description=f"deploy workflow, environment {environment}: deploys this stack",
            assume_role_policy=pulumi.Output.from_input(provider_arn).apply(
                lambda arn: github_trust_policy(arn, subjects)
            ),
            opts=child,
        )
        aws.iam.RolePolicy(f"{name}-deployer-inline", role=role.id, policy=policy, opts=child)
        for index, policy_arn in enumerate(policy_arns):
            aws.iam.RolePolicyAttachment(
                f"{name}-deployer-policy-{index}", role=role.name, policy_arn=policy_arn, opts=child
            )
        self.access_ready = []
        if cluster_name is not None:
            self.access_ready.append(
                deploy_access(f"{name}-deployer", cluster_name, role.arn, partition, self)
            )
        self.role_arn = role.arn
        self.environment = environment
        self.register_outputs({"role_arn": self.role_arn})


def github_deploy_role(
    name: str,
    config: StackConfig,
    provider_arn: pulumi.Input[str],
    repository_arn: pulumi.Input[str],
    cluster: Cluster,
    deploy: VpcDeploy | None,
) -> GithubDeployRole | None:
    """The stack's deploy role for its path; None for a runner-deployed stack without
    `ci.deployPolicyArns` (deployed by hand, as the admin role)."""
    assert config.ci is not None  # the workflow, its repository and OIDC provider come from ci
    partition = config.cluster.partition
    if deploy is not None:
        policy = pulumi.Output.all(repository_arn, deploy.project_arn, deploy.log_group_arn)
        return GithubDeployRole(
            f"{name}-gha",
            config.ci.github_url,
            provider_arn,
            IN_VPC_ENVIRONMENT,
            policy.apply(lambda a: in_vpc_deploy_policy(*a)),
            partition,
        )
    if not config.ci.deploy_policy_arns:
        return None
    return GithubDeployRole(
        f"{name}-gha",
        config.ci.github_url,
        provider_arn,
        RUNNER_ENVIRONMENT,
        pulumi.Output.all(repository_arn, cluster.arn).apply(lambda a: runner_deploy_policy(*a)),
        partition,
        policy_arns=config.ci.deploy_policy_arns,
        cluster_name=cluster.name,
    )
