"""The roles GitHub Actions assumes through OIDC (no keys anywhere), each trusting one kind of
workflow run of this repository only:

- preview: the pull-request `pulumi preview` (job environment `preview`): an explicit allow-list
  of what a preview of these stacks reads (ci_policies.preview_policy), no managed policy: code
  from a pull request runs with it, so it sees no content and no more configuration than that.
- build: the deploy workflow's image job in the protected `ci.releaseEnvironment` (its branch
  and tag rules and reviewers are the environment's): start and follow the release build, read
  image tags, never override its buildspec. Nothing else; the build's own role pushes.
Each stack's deploy role is its own (infra/github_deploy.py), for this provider.
"""

from __future__ import annotations

import re

import pulumi
import pulumi_aws as aws

from infra.ci_policies import (
    GITHUB_OIDC_HOST,
    github_trust_policy,
    preview_policy,
    start_release_build_policy,
)
from infra.settings.types import CiConfig


def repository_slug(github_url: str) -> str:
    """`owner/name` of https://github.com/owner/name(.git)."""
    return re.sub(r"\.git$", "", github_url.removeprefix("https://github.com/"))


def preview_subjects(slug: str) -> list[str]:
    return [f"repo:{slug}:environment:preview"]


def build_subjects(slug: str, environment: str) -> list[str]:
    """Only jobs of the protected environment: anyone who can push a tag or a branch could
    otherwise drive the one build that writes the release repository."""
    return [f"repo:{slug}:environment:{environment}"]


class GithubRoles(pulumi.ComponentResource):
    provider_arn: pulumi.Output[str]
    preview_role_arn: pulumi.Output[str]
    build_role_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        config: CiConfig,
        partition: str,
        project_arn: pulumi.Input[str],
        log_group_arn: pulumi.Input[str],
        repository_arn: pulumi.Input[str],
        preview_secret_arns: tuple[str, ...] = (),
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:GithubRoles", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        provider_arn: pulumi.Input[str]
        if config.github_oidc_provider_arn:
            provider_arn = config.github_oidc_provider_arn  # one per account: maybe shared
        else:
            provider_arn = aws.iam.OpenIdConnectProvider(
                f"{name}-oidc",
                url=f"https://{GITHUB_OIDC_HOST}",
                client_id_lists=["sts.amazonaws.com"],
                opts=child,
            ).arn
        slug = repository_slug(config.github_url)

        preview = aws.iam.Role(
            f"{name}-preview",
            description="pulumi preview on pull requests: read configuration, never data",
            assume_role_policy=pulumi.Output.from_input(provider_arn).apply(
                lambda arn: github_trust_policy(arn, preview_subjects(slug))
            ),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-preview-inline",
            role=preview.id,
            policy=preview_policy(preview_secret_arns),
            opts=child,
        )

        build = aws.iam.Role(
            f"{name}-build",
            description="deploy workflow: start and follow the release image build",
            assume_role_policy=pulumi.Output.from_input(provider_arn).apply(
                lambda arn: github_trust_policy(
                    arn, build_subjects(slug, config.release_environment)
                )
            ),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-build-inline",
            role=build.id,
            policy=pulumi.Output.all(project_arn, log_group_arn, repository_arn).apply(
                lambda a: start_release_build_policy(*a)
            ),
            opts=child,
        )
        self.provider_arn = pulumi.Output.from_input(provider_arn)
        self.preview_role_arn = preview.arn
        self.build_role_arn = build.arn
        self.register_outputs(
            {"preview_role_arn": self.preview_role_arn, "build_role_arn": self.build_role_arn}
        )
