"""The image builds' IAM and repository policies, as plain functions of resolved ARNs.

Two builders, two roles (see infra/ci.py): the release build may push the trainer image and
the layer cache; the pull-request build may only read the cache. A pull request runs its own
buildspec and build.sh, so these policies, not the scripts, are what keeps it from pushing.
"""

from __future__ import annotations

from infra.policies import (
    BUILD_ARTIFACTS_PREFIX,
    ECR_LOGIN,
    ECR_PULL_ACTIONS,
    ECR_PUSH_ACTIONS,
    policy_document,
)

ECR_WRITE_ACTIONS = sorted(set(ECR_PUSH_ACTIONS) - set(ECR_PULL_ACTIONS) | {"ecr:BatchDeleteImage"})
"""Every ECR action that adds, changes or removes an image or a tag."""


def _logs(log_group_arn: str) -> dict:
    return {
        "Sid": "BuildLogs",
        "Effect": "Allow",
        "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
        "Resource": [log_group_arn, f"{log_group_arn}:*"],
    }


def _source(connection_arn: str | None) -> list[dict]:
    if not connection_arn:
        return []
    return [
        {
            "Sid": "GitHubConnection",
            "Effect": "Allow",
            "Action": ["codeconnections:GetConnectionToken", "codeconnections:UseConnection"],
            "Resource": connection_arn,
        }
    ]


def release_build_policy(
    repository_arn: str,
    cache_repository_arn: str,
    log_group_arn: str,
    artifacts_bucket_arn: str,
    artifacts_key_arn: str,
    connection_arn: str | None = None,
) -> str:
    """Main, tag and nightly builds: push the image, rewrite the cache, write the artifact."""
    return policy_document(
        [
            {
                "Sid": "PushTrainerImage",
                "Effect": "Allow",
                # DescribeImages: build.sh checks whether a tag exists before pushing.
                "Action": [*ECR_PUSH_ACTIONS, "ecr:DescribeImages"],
                "Resource": repository_arn,
            },
            {
                "Sid": "WriteBuildCache",
                "Effect": "Allow",
                "Action": ECR_PUSH_ACTIONS,
                "Resource": cache_repository_arn,
            },
            {"Sid": "EcrLogin", **ECR_LOGIN},
            _logs(log_group_arn),
            {
                "Sid": "BuildArtifact",
                "Effect": "Allow",
                "Action": "s3:PutObject",
                "Resource": f"{artifacts_bucket_arn}/{BUILD_ARTIFACTS_PREFIX}/*",
            },
            {
                "Sid": "ArtifactBucketLocation",
                "Effect": "Allow",
                "Action": ["s3:GetBucketAcl", "s3:GetBucketLocation"],
                "Resource": artifacts_bucket_arn,
            },
            {
                "Sid": "ArtifactKey",
                "Effect": "Allow",
                "Action": "kms:GenerateDataKey",
                "Resource": artifacts_key_arn,
            },
            *_source(connection_arn),
        ]
    )


def pull_request_build_policy(
    cache_repository_arn: str, log_group_arn: str, connection_arn: str | None = None
) -> str:
    """Pull-request builds: read the layer cache and write their own logs. No ECR write, no
    release repository, no bucket: whatever the pull request's buildspec does."""
    return policy_document(
        [
            {
                "Sid": "ReadBuildCache",
                "Effect": "Allow",
                "Action": ECR_PULL_ACTIONS,
                "Resource": cache_repository_arn,
            },
            {"Sid": "EcrLogin", **ECR_LOGIN},
            _logs(log_group_arn),
            *_source(connection_arn),
        ]
    )


def only_writer_repository_policy(writer_role_arn: str) -> str:
    """A repository policy denying every image write to anyone but `writer_role_arn`, so even a
    role granted ecr:* by mistake (or a pull-request build role widened later) cannot push."""
    return policy_document(
        [
            {
                "Sid": "OnlyTheReleaseBuildWrites",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ECR_WRITE_ACTIONS,
                "Condition": {"ArnNotEquals": {"aws:PrincipalArn": writer_role_arn}},
            }
        ]
    )


GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"


def github_trust_policy(provider_arn: str, subjects: list[str]) -> str:
    """Trust GitHub's OIDC tokens for these `sub` claims only (wildcards allowed)."""
    return policy_document(
        [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider_arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {f"{GITHUB_OIDC_HOST}:aud": "sts.amazonaws.com"},
                    "StringLike": {f"{GITHUB_OIDC_HOST}:sub": subjects},
                },
            }
        ]
    )


def preview_policy(secret_arns: tuple[str, ...] = ()) -> str:
    """What `pulumi preview` of these stacks reads, and nothing more: code from a pull request
    runs with it. A preview without --refresh diffs the program against the saved state and
    reads no resource from AWS; the providers only ask who they are (sts:GetCallerIdentity),
    and the program's one lookup is the Training API's token-hash secret
    (`aws.secretsmanager.get_secret_version`, infra/training_api.py), named here exactly."""
    statements = [
        {
            "Sid": "ProviderIdentity",
            "Effect": "Allow",
            "Action": "sts:GetCallerIdentity",
            "Resource": "*",
        }
    ]
    if secret_arns:
        statements.append(
            {
                "Sid": "TrainingApiTokenHashes",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": sorted(secret_arns),
            }
        )
    return policy_document(statements)


def no_buildspec_override(project_arn: str) -> dict:
    """The build runs the repository's buildspec, never commands sent with the request
    (`codebuild:source.buildspec` is present only then)."""
    return {
        "Sid": "NoBuildspecOverride",
        "Effect": "Deny",
        "Action": ["codebuild:StartBuild", "codebuild:StartBuildBatch"],
        "Resource": project_arn,
        "Condition": {"Null": {"codebuild:source.buildspec": "false"}},
    }


def start_release_build_policy(project_arn: str, log_group_arn: str, repository_arn: str) -> str:
    """The deploy workflow's image job: start and follow the release build, read its digest."""
    return policy_document(
        [
            no_buildspec_override(project_arn),
            {
                "Sid": "ReleaseBuild",
                "Effect": "Allow",
                "Action": [
                    "codebuild:BatchGetBuilds",
                    "codebuild:BatchGetProjects",
                    "codebuild:StartBuild",
                ],
                "Resource": project_arn,
            },
            {
                "Sid": "FollowBuildLogs",
                "Effect": "Allow",
                "Action": "logs:GetLogEvents",
                "Resource": [log_group_arn, f"{log_group_arn}:*"],
            },
            {
                "Sid": "ReadImageTags",
                "Effect": "Allow",
                "Action": "ecr:DescribeImages",
                "Resource": repository_arn,
            },
        ]
    )


SCAN_GATE_ACTIONS = ["ecr:BatchGetImage", "ecr:DescribeImageScanFindings", "ecr:DescribeImages"]
"""images/scan_gate.py: the image index (BatchGetImage), its platform image's scan (`ecr wait
image-scan-complete` and the findings: DescribeImageScanFindings), image details."""


def _scan_gate(repository_arn: str) -> dict:
    return {
        "Sid": "ScanGate",
        "Effect": "Allow",
        "Action": SCAN_GATE_ACTIONS,
        "Resource": repository_arn,
    }


def runner_deploy_policy(repository_arn: str, cluster_arn: str) -> str:
    """The deploy workflow's runner deploying this stack (public endpoint): the scan gate and the
    cluster's endpoint; `pulumi up`'s AWS side comes from `ci.deployPolicyArns`, the cluster
    side from the role's access entry."""
    return policy_document(
        [
            _scan_gate(repository_arn),
            {
                "Sid": "ClusterEndpoint",
                "Effect": "Allow",
                "Action": "eks:DescribeCluster",
                "Resource": cluster_arn,
            },
        ]
    )


def in_vpc_deploy_policy(repository_arn: str, project_arn: str, log_group_arn: str) -> str:
    """The deploy workflow's prod job: the scan gate, then start and follow the in-VPC deploy
    project (what aws-codebuild-run-build calls). `pulumi up` runs with the project's role."""
    return policy_document(
        [
            _scan_gate(repository_arn),
            {
                "Sid": "DeployProject",
                "Effect": "Allow",
                "Action": ["codebuild:BatchGetBuilds", "codebuild:StartBuild"],
                "Resource": project_arn,
            },
            {
                "Sid": "FollowDeployLogs",
                "Effect": "Allow",
                "Action": "logs:GetLogEvents",
                "Resource": [log_group_arn, f"{log_group_arn}:*"],
            },
            # The build runs the repository's infra/deploy/buildspec.yml.
            no_buildspec_override(project_arn),
        ]
    )
