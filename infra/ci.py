"""CodeBuild for the trainer image: two projects with two roles, so code nobody merged cannot
touch what ships.

- The release project builds main (started by the deploy workflow, never by a webhook, so one
  push is built once), `vX.Y.Z` tags (same) and a nightly rebuild (EventBridge, BUILD_KIND
  nightly). Its role alone may push the image and rewrite the layer cache; repository policies
  deny every other principal any image write.
- The pull-request project builds and self-tests pull requests opened by the listed GitHub
  accounts only (`ci.pullRequestActorIds`; forks of anyone else never reach a privileged
  builder). Its role can read the layer cache and write its logs, nothing else: a pull request
  that edits build.sh or the buildspec to push gets AccessDenied from ECR.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.ci_policies import (
    only_writer_repository_policy,
    pull_request_build_policy,
    release_build_policy,
)
from infra.github_oidc import GithubRoles
from infra.iam import service_role
from infra.policies import BUILD_ARTIFACTS_PREFIX, start_build_policy
from infra.settings.types import CiConfig

BUILDSPEC = "images/buildspec.yml"
BUILD_IMAGE = "aws/codebuild/standard:7.0"
PR_EVENTS = "PULL_REQUEST_CREATED, PULL_REQUEST_UPDATED, PULL_REQUEST_REOPENED"
FORK_APPROVAL = {
    "requires_comment_approval": "FORK_PULL_REQUESTS",
    "approver_roles": ["GITHUB_ADMIN", "GITHUB_MAINTAIN"],
}


def pull_request_filter_groups(branch: str, actor_ids: tuple[str, ...]) -> list[dict]:
    """One group: a pull request into `branch` by one of `actor_ids` (numeric GitHub ids).
    No PUSH group: pushes are built by the release project, started by the deploy workflow."""
    return [
        {
            "filters": [
                {"type": "EVENT", "pattern": PR_EVENTS},
                {"type": "BASE_REF", "pattern": f"^refs/heads/{branch}$"},
                {"type": "ACTOR_ACCOUNT_ID", "pattern": "^(" + "|".join(actor_ids) + ")$"},
            ]
        }
    ]


def nightly_target_input() -> str:
    """What EventBridge passes to StartBuild: a nightly build of the default branch."""
    return json.dumps(
        {
            "environmentVariablesOverride": [
                {"name": "BUILD_KIND", "value": "nightly", "type": "PLAINTEXT"}
            ]
        }
    )


class ImageBuild(pulumi.ComponentResource):
    project_name: pulumi.Output[str]
    pull_request_project_name: pulumi.Output[str] | None

    def __init__(
        self,
        name: str,
        config: CiConfig,
        region: str,
        partition: str,
        account_id: str,
        repository_arn: pulumi.Input[str],
        repository_url: pulumi.Input[str],
        repository_name: pulumi.Input[str],
        cache_repository_arn: pulumi.Input[str],
        cache_repository_url: pulumi.Input[str],
        cache_repository_name: pulumi.Input[str],
        artifacts_bucket: pulumi.Input[str],
        artifacts_bucket_arn: pulumi.Input[str],
        artifacts_key_arn: pulumi.Input[str],
        log_retention_days: int,
        preview_secret_arns: tuple[str, ...] = (),
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:ImageBuild", name, None, opts)
        self._name, self._config, self._region = name, config, region
        self._account_id = account_id
        # Service roles trust their service for this account's own resource only (confused
        # deputy): Pulumi auto-names each `<logical name>-<7 random>`.
        arn_of = f"arn:{partition}:{{service}}:{region}:{account_id}:{{kind}}/{name}-{{suffix}}-*"
        self._log_retention_days = log_retention_days
        child = pulumi.ResourceOptions(parent=self)

        release_logs = self._log_group("logs")
        release_role = service_role(
            f"{name}-codebuild",
            "codebuild.amazonaws.com",
            self,
            partition,
            inline_policy=pulumi.Output.all(
                repository_arn,
                cache_repository_arn,
                release_logs.arn,
                artifacts_bucket_arn,
                artifacts_key_arn,
            ).apply(lambda a: release_build_policy(*a, connection_arn=config.connection_arn)),
            source_account=account_id,
            source_arn=arn_of.format(service="codebuild", kind="project", suffix="image"),
        )
        for repo, label in ((repository_name, "release"), (cache_repository_name, "cache")):
            aws.ecr.RepositoryPolicy(
                f"{name}-{label}-writers",
                repository=repo,
                policy=release_role.arn.apply(only_writer_repository_policy),
                opts=child,
            )
        project = self._project(
            "image",
            "Builds and pushes the trainstack trainer image (main, tags, nightly)",
            release_role,
            release_logs,
            build_kind="release",
            repository_url=repository_url,
            cache_repository_url=cache_repository_url,
            # image.json (URI + digest) kept per build, KMS-encrypted with the bucket's key.
            artifacts={
                "type": "S3",
                "location": artifacts_bucket,
                "path": BUILD_ARTIFACTS_PREFIX,
                "namespace_type": "BUILD_ID",
                "packaging": "NONE",
            },
            encryption_key=artifacts_key_arn,
        )
        self._nightly(
            project,
            partition,
            arn_of.format(service="events", kind="rule", suffix="nightly"),
        )
        self.project_name = project.name
        self.github = GithubRoles(
            f"{name}-gha",
            config,
            partition,
            project_arn=project.arn,
            log_group_arn=release_logs.arn,
            repository_arn=repository_arn,
            preview_secret_arns=preview_secret_arns,
            opts=child,
        )

        self.pull_request_project_name = None
        if config.pull_request_actor_ids:
            pr_logs = self._log_group("pr-logs")
            pr_role = service_role(
                f"{name}-pr-build",
                "codebuild.amazonaws.com",
                self,
                partition,
                inline_policy=pulumi.Output.all(cache_repository_arn, pr_logs.arn).apply(
                    lambda a: pull_request_build_policy(*a, connection_arn=config.connection_arn)
                ),
                source_account=account_id,
                source_arn=arn_of.format(service="codebuild", kind="project", suffix="pr-image"),
            )
            pr_project = self._project(
                "pr-image",
                "Builds and self-tests pull requests' trainer image; cannot push",
                pr_role,
                pr_logs,
                build_kind="pull-request",
                repository_url=repository_url,
                cache_repository_url=cache_repository_url,
                artifacts={"type": "NO_ARTIFACTS"},
            )
            aws.codebuild.Webhook(
                f"{name}-github",
                project_name=pr_project.name,
                build_type="BUILD",
                filter_groups=pull_request_filter_groups(
                    config.branch, config.pull_request_actor_ids
                ),
                # Belt and braces: even a listed account's pull request from a fork waits for
                # a maintainer's approving comment before it reaches a builder.
                pull_request_build_policy=FORK_APPROVAL,
                opts=child,
            )
            self.pull_request_project_name = pr_project.name
        self.register_outputs(
            {
                "project_name": self.project_name,
                "pull_request_project_name": self.pull_request_project_name,
            }
        )

    def _log_group(self, suffix: str) -> aws.cloudwatch.LogGroup:
        return aws.cloudwatch.LogGroup(
            f"{self._name}-{suffix}",
            retention_in_days=self._log_retention_days,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _project(
        self,
        suffix: str,
        description: str,
        role: aws.iam.Role,
        logs: aws.cloudwatch.LogGroup,
        *,
        build_kind: str,
        repository_url: pulumi.Input[str],
        cache_repository_url: pulumi.Input[str],
        artifacts: dict,
        encryption_key: pulumi.Input[str] | None = None,
    ) -> aws.codebuild.Project:
        config = self._config
        source: dict = {
            "type": "GITHUB",
            "location": config.github_url,
            "buildspec": BUILDSPEC,
            "git_clone_depth": 1,
            "report_build_status": True,
        }
        if config.connection_arn:
            source["auth"] = {"type": "CODECONNECTIONS", "resource": config.connection_arn}
        return aws.codebuild.Project(
            f"{self._name}-{suffix}",
            description=description,
            service_role=role.arn,
            source=source,
            source_version=config.branch,
            artifacts=artifacts,
            encryption_key=encryption_key,
            environment={
                "type": "LINUX_CONTAINER",
                "compute_type": "BUILD_GENERAL1_LARGE",
                "image": BUILD_IMAGE,
                # Docker-in-Docker needs a privileged build container; the role, not the
                # container, is what limits a build.
                "privileged_mode": True,
                "environment_variables": [
                    {"name": "REPOSITORY_URI", "value": repository_url},
                    {"name": "BUILD_CACHE_REPOSITORY_URI", "value": cache_repository_url},
                    {"name": "AWS_REGION", "value": self._region},
                    # images/build.sh's mode, set by the project, never by the source.
                    {"name": "BUILD_KIND", "value": build_kind},
                ],
            },
            logs_config={"cloudwatch_logs": {"group_name": logs.name, "status": "ENABLED"}},
            build_timeout=90,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _nightly(self, project: aws.codebuild.Project, partition: str, rule_arn: str) -> None:
        """Rebuild main every night even if it did not change, so base-image and apt security
        fixes arrive; tagged nightly-YYYYMMDD-<sha>, which no deploy picks unless asked."""
        child = pulumi.ResourceOptions(parent=self)
        events_role = service_role(
            f"{self._name}-schedule",
            "events.amazonaws.com",
            self,
            partition,
            inline_policy=project.arn.apply(start_build_policy),
            source_account=self._account_id,
            source_arn=rule_arn,
        )
        nightly = aws.cloudwatch.EventRule(
            f"{self._name}-nightly",
            description="Nightly trainer image rebuild (security fixes)",
            schedule_expression=self._config.nightly_schedule,
            opts=child,
        )
        aws.cloudwatch.EventTarget(
            f"{self._name}-nightly",
            rule=nightly.name,
            arn=project.arn,
            role_arn=events_role.arn,
            input=nightly_target_input(),
            opts=child,
        )
