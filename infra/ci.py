"""CodeBuild building the trainer image from `images/` on pushes to main, pull requests and a
nightly schedule. Its role may push only to the one repository and write only its log group."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.iam import service_role
from infra.policies import BUILD_ARTIFACTS_PREFIX, codebuild_policy, start_build_policy
from infra.settings import CiConfig

BUILDSPEC = "images/buildspec.yml"
BUILD_IMAGE = "aws/codebuild/standard:7.0"
PR_EVENTS = "PULL_REQUEST_CREATED, PULL_REQUEST_UPDATED, PULL_REQUEST_REOPENED"


class ImageBuild(pulumi.ComponentResource):
    project_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        config: CiConfig,
        region: str,
        partition: str,
        repository_arn: pulumi.Input[str],
        repository_url: pulumi.Input[str],
        artifacts_bucket: pulumi.Input[str],
        artifacts_bucket_arn: pulumi.Input[str],
        artifacts_key_arn: pulumi.Input[str],
        log_retention_days: int,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:ImageBuild", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs", retention_in_days=log_retention_days, opts=child
        )
        role = service_role(
            f"{name}-codebuild",
            "codebuild.amazonaws.com",
            self,
            partition,
            inline_policy=pulumi.Output.all(
                repository_arn, log_group.arn, artifacts_bucket_arn, artifacts_key_arn
            ).apply(
                lambda arns: codebuild_policy(
                    arns[0], arns[1], config.connection_arn, artifacts=(arns[2], arns[3])
                )
            ),
        )
        source: dict = {
            "type": "GITHUB",
            "location": config.github_url,
            "buildspec": BUILDSPEC,
            "git_clone_depth": 1,
            "report_build_status": True,
        }
        if config.connection_arn:
            source["auth"] = {"type": "CODECONNECTIONS", "resource": config.connection_arn}
        project = aws.codebuild.Project(
            f"{name}-image",
            description="Builds and pushes the trainstack trainer image",
            service_role=role.arn,
            source=source,
            source_version=config.branch,
            # image.json (URI + digest) kept per build, KMS-encrypted with the bucket's key;
            # deploys also get the digest from the build's exported variables.
            artifacts={
                "type": "S3",
                "location": artifacts_bucket,
                "path": BUILD_ARTIFACTS_PREFIX,
                "namespace_type": "BUILD_ID",
                "packaging": "NONE",
            },
            encryption_key=artifacts_key_arn,
            environment={
                "type": "LINUX_CONTAINER",
                "compute_type": "BUILD_GENERAL1_LARGE",
                "image": BUILD_IMAGE,
                # Docker-in-Docker needs a privileged build container.
                "privileged_mode": True,
                "environment_variables": [
                    {"name": "REPOSITORY_URI", "value": repository_url},
                    {"name": "AWS_REGION", "value": region},
                ],
            },
            logs_config={"cloudwatch_logs": {"group_name": log_group.name, "status": "ENABLED"}},
            build_timeout=60,
            opts=child,
        )
        aws.codebuild.Webhook(
            f"{name}-github",
            project_name=project.name,
            build_type="BUILD",
            filter_groups=[
                {
                    "filters": [
                        {"type": "EVENT", "pattern": "PUSH"},
                        {"type": "HEAD_REF", "pattern": f"^refs/heads/{config.branch}$"},
                    ]
                },
                {"filters": [{"type": "EVENT", "pattern": PR_EVENTS}]},
            ],
            opts=child,
        )

        events_role = service_role(
            f"{name}-schedule",
            "events.amazonaws.com",
            self,
            partition,
            inline_policy=project.arn.apply(start_build_policy),
        )
        nightly = aws.cloudwatch.EventRule(
            f"{name}-nightly",
            description="Nightly trainer image build",
            schedule_expression=config.nightly_schedule,
            opts=child,
        )
        aws.cloudwatch.EventTarget(
            f"{name}-nightly",
            rule=nightly.name,
            arn=project.arn,
            role_arn=events_role.arn,
            opts=child,
        )
        self.project_name = project.name
        self.register_outputs({"project_name": self.project_name})
