"""The in-VPC deploy path for a private cluster: a CodeBuild project in the VPC's private subnets
that runs `infra/deploy/buildspec.yml`: images/deploy.sh's `up`, `smoke` and `promote` (the same
steps the deploy workflow's runner runs for dev), or `rollback` with DEPLOY_ACTION=rollback.

The workflow starts it through OIDC (aws-actions/aws-codebuild-run-build), which streams its log
and fails when it fails. From inside the VPC it reaches the private API endpoint: the cluster
security group admits HTTPS from this project's security group only. Its role has its own EKS
access entry, and the Pulumi access token reaches the build only as a reference (a Secrets
Manager secret or SSM SecureString that CodeBuild resolves when the build starts).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.iam import service_role
from infra.policies import policy_document
from infra.settings.types import DeployConfig
from infra.settings.versions import PULUMI_CLI_VERSION

BUILDSPEC = "infra/deploy/buildspec.yml"
BUILD_IMAGE = "aws/codebuild/standard:7.0"
DEPLOY_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"
"""`pulumi up` creates CRDs, ClusterRoles and webhooks (training operator, Helm charts): only
cluster-admin may grant what they grant. EKS's narrower admin/edit policies are namespaced."""
TOKEN_VARIABLE = "PULUMI_ACCESS_TOKEN"


def token_variable(secret_arn: str) -> dict:
    """The token as a reference CodeBuild resolves at build start; never a plain value."""
    kind = "SECRETS_MANAGER" if ":secretsmanager:" in secret_arn else "PARAMETER_STORE"
    reference = secret_arn
    if kind == "PARAMETER_STORE":  # CodeBuild takes the parameter's name, not its ARN
        reference = "/" + secret_arn.split(":parameter/", 1)[1]
    return {"name": TOKEN_VARIABLE, "type": kind, "value": reference}


def deploy_policy(
    log_group_arn: str,
    secret_arn: str,
    cluster_arn: str,
    subnet_arns: list[str],
    connection_arn: str | None,
) -> str:
    """What the build needs beyond `policyArns` (the AWS side of `pulumi up`): its log, the
    token, the cluster's endpoint and CodeBuild's network interfaces in the deploy subnets."""
    token_actions = (
        ["secretsmanager:GetSecretValue"]
        if ":secretsmanager:" in secret_arn
        else ["ssm:GetParameters"]
    )
    _, partition, _, region, account = cluster_arn.split(":")[:5]
    statements = [
        {
            "Sid": "BuildLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [log_group_arn, f"{log_group_arn}:*"],
        },
        {"Sid": "PulumiToken", "Effect": "Allow", "Action": token_actions, "Resource": secret_arn},
        {
            "Sid": "ClusterEndpoint",
            "Effect": "Allow",
            "Action": "eks:DescribeCluster",
            "Resource": cluster_arn,
        },
        {
            # CodeBuild's documented VPC permissions; these Describe/Create calls take no
            # resource scoping, the permission to attach is limited to the deploy subnets.
            "Sid": "VpcNetworkInterfaces",
            "Effect": "Allow",
            "Action": [
                "ec2:CreateNetworkInterface",
                "ec2:DeleteNetworkInterface",
                "ec2:DescribeDhcpOptions",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSubnets",
                "ec2:DescribeVpcs",
            ],
            "Resource": "*",
        },
        {
            # Scoped to the account's interfaces in the cluster's region (CodeBuild's VPC guide).
            "Sid": "VpcInterfacePermission",
            "Effect": "Allow",
            "Action": "ec2:CreateNetworkInterfacePermission",
            "Resource": f"arn:{partition}:ec2:{region}:{account}:network-interface/*",
            "Condition": {
                "StringEquals": {"ec2:AuthorizedService": "codebuild.amazonaws.com"},
                "ArnEquals": {"ec2:Subnet": subnet_arns},
            },
        },
    ]
    if connection_arn:
        statements.append(
            {
                "Sid": "GitHubConnection",
                "Effect": "Allow",
                "Action": ["codeconnections:GetConnectionToken", "codeconnections:UseConnection"],
                "Resource": connection_arn,
            }
        )
    return policy_document(statements)


def deploy_access(
    name: str,
    cluster_name: pulumi.Input[str],
    principal_arn: pulumi.Input[str],
    partition: str,
    parent: pulumi.Resource,
) -> aws.eks.AccessPolicyAssociation:
    """An access entry for a role that runs `pulumi up`, with DEPLOY_ACCESS_POLICY."""
    child = pulumi.ResourceOptions(parent=parent)
    entry = aws.eks.AccessEntry(
        name, cluster_name=cluster_name, principal_arn=principal_arn, type="STANDARD", opts=child
    )
    return aws.eks.AccessPolicyAssociation(
        name,
        cluster_name=cluster_name,
        principal_arn=entry.principal_arn,
        policy_arn=f"arn:{partition}:eks::aws:cluster-access-policy/{DEPLOY_ACCESS_POLICY}",
        access_scope={"type": "cluster"},
        opts=child,
    )


class VpcDeploy(pulumi.ComponentResource):
    project_name: pulumi.Output[str]
    project_arn: pulumi.Output[str]
    log_group_arn: pulumi.Output[str]
    """Where the build's log goes (the workflow follows it there)."""
    role_arn: pulumi.Output[str]
    access_ready: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        config: DeployConfig,
        region: str,
        partition: str,
        account_id: str,
        vpc_id: pulumi.Input[str],
        subnet_ids: list[pulumi.Input[str]],
        cluster_name: pulumi.Input[str],
        cluster_arn: pulumi.Input[str],
        cluster_security_group_id: pulumi.Input[str],
        log_retention_days: int,
        opts: pulumi.ResourceOptions | None = None,
    ):
        # The type token keeps its first name: it is part of every child's URN, and a new one
        # would make `pulumi up` replace the deployed project.
        super().__init__("trainstack:infra:DeployRunner", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        security_group = aws.ec2.SecurityGroup(
            f"{name}-deploy",
            vpc_id=vpc_id,
            description="In-VPC deploy: HTTPS out (AWS APIs, the cluster, GitHub, PyPI, Pulumi)",
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-deploy-https-out",
            security_group_id=security_group.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            opts=child,
        )
        # The private API endpoint admits the deploy, and nothing else new.
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-api-from-deploy",
            security_group_id=cluster_security_group_id,
            referenced_security_group_id=security_group.id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="Kubernetes API from the in-VPC deploy project",
            opts=child,
        )

        log_group = aws.cloudwatch.LogGroup(
            f"{name}-deploy-logs", retention_in_days=log_retention_days, opts=child
        )
        subnet_arns = pulumi.Output.all(*subnet_ids).apply(
            lambda ids: [f"arn:{partition}:ec2:{region}:{account_id}:subnet/{i}" for i in ids]
        )
        role = service_role(
            f"{name}-deploy",
            "codebuild.amazonaws.com",
            self,
            partition,
            inline_policy=pulumi.Output.all(log_group.arn, cluster_arn, subnet_arns).apply(
                lambda args: deploy_policy(
                    args[0], config.pulumi_token_secret_arn, args[1], args[2], config.connection_arn
                )
            ),
            source_account=account_id,
            # Pulumi auto-names the project `<name>-deploy-<7 random>`.
            source_arn=f"arn:{partition}:codebuild:{region}:{account_id}:project/{name}-deploy-*",
        )
        for index, policy_arn in enumerate(config.policy_arns):
            aws.iam.RolePolicyAttachment(
                f"{name}-deploy-policy-{index}", role=role.name, policy_arn=policy_arn, opts=child
            )

        access = deploy_access(f"{name}-deploy", cluster_name, role.arn, partition, self)

        source: dict = {
            "type": "GITHUB",
            "location": config.github_url,
            "buildspec": BUILDSPEC,
            "git_clone_depth": 1,
        }
        if config.connection_arn:
            source["auth"] = {"type": "CODECONNECTIONS", "resource": config.connection_arn}
        project = aws.codebuild.Project(
            f"{name}-deploy",
            description="Deploys the stack from inside the VPC: pulumi up, then the smoke job",
            service_role=role.arn,
            source=source,
            artifacts={"type": "NO_ARTIFACTS"},
            environment={
                "type": "LINUX_CONTAINER",
                "compute_type": "BUILD_GENERAL1_MEDIUM",
                "image": BUILD_IMAGE,
                "privileged_mode": False,
                "environment_variables": [
                    token_variable(config.pulumi_token_secret_arn),
                    {"name": "PULUMI_CLI_VERSION", "value": PULUMI_CLI_VERSION},
                    {"name": "AWS_REGION", "value": region},
                ],
            },
            vpc_config={
                "vpc_id": vpc_id,
                "subnets": subnet_ids,
                "security_group_ids": [security_group.id],
            },
            logs_config={"cloudwatch_logs": {"group_name": log_group.name, "status": "ENABLED"}},
            # Two builds never update the stack at once: Pulumi's stack lock refuses the second,
            # and the workflow queues deploys per stack.
            build_timeout=config.timeout_minutes,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[access]),
        )
        self.project_name = project.name
        self.project_arn = project.arn
        self.log_group_arn = log_group.arn
        self.role_arn = role.arn
        self.security_group_id = security_group.id
        self.access_ready = [access]
        """The deploy role can use the Kubernetes API once these exist."""
        self.register_outputs({"project_name": self.project_name})
