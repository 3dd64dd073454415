"""IAM and bucket policy documents as plain functions of resolved ARNs (call them inside
`Output.apply`).

Least privilege: every statement names its resources; the only `*` is
`ecr:GetAuthorizationToken`, which IAM does not scope to a repository.
"""

from __future__ import annotations

import json

ECR_PULL_ACTIONS = [
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
]
ECR_PUSH_ACTIONS = [
    *ECR_PULL_ACTIONS,
    "ecr:CompleteLayerUpload",
    "ecr:InitiateLayerUpload",
    "ecr:PutImage",
    "ecr:UploadLayerPart",
]
ECR_LOGIN = {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"}

# The runs bucket's prefixes, each owned by one writer that the policies below scope to.
RUNS_PREFIX = "runs"
"""`storage.root` for jobs is s3://<bucket>/runs; the training role may touch only this."""
BUILD_ARTIFACTS_PREFIX = "image-builds"
"""Bucket prefix for the build's artifact (image.json: URI and digest of each pushed image)."""
RESERVED_PREFIXES = (RUNS_PREFIX, BUILD_ARTIFACTS_PREFIX)


def _document(statements: list[dict]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def assume_role_policy(service: str, *, tag_session: bool = False) -> str:
    """Trust policy letting one AWS service principal assume the role."""
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else "sts:AssumeRole"
    return _document([{"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}])


def training_policy(bucket_arn: str, prefix: str, kms_key_arn: str, repository_arn: str) -> str:
    """Pods of training jobs: read/write `<bucket>/<prefix>/*` only, and pull the one image."""
    return _document(
        [
            {
                "Sid": "RunObjects",
                "Effect": "Allow",
                "Action": [
                    "s3:AbortMultipartUpload",
                    "s3:DeleteObject",
                    "s3:GetObject",
                    "s3:PutObject",
                ],
                "Resource": f"{bucket_arn}/{prefix}/*",
            },
            {
                "Sid": "ListRuns",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket_arn,
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}},
            },
            {
                # SSE-KMS objects need the bucket's key to be written and read.
                "Sid": "BucketKey",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": kms_key_arn,
            },
            {
                "Sid": "PullTrainerImage",
                "Effect": "Allow",
                "Action": ECR_PULL_ACTIONS,
                "Resource": repository_arn,
            },
            {"Sid": "EcrLogin", **ECR_LOGIN},
        ]
    )


def codebuild_policy(
    repository_arn: str,
    log_group_arn: str,
    connection_arn: str | None = None,
    artifacts: tuple[str, str] | None = None,
) -> str:
    """The image build: push to its repository, write its own log group and, with `artifacts`
    (bucket ARN, bucket KMS key ARN), its artifact under `BUILD_ARTIFACTS_PREFIX` — nothing else."""
    statements = [
        {
            "Sid": "PushTrainerImage",
            "Effect": "Allow",
            # DescribeImages: build.sh checks whether a tag exists before pushing, so an
            # immutable tag is reused, never overwritten.
            "Action": [*ECR_PUSH_ACTIONS, "ecr:DescribeImages"],
            "Resource": repository_arn,
        },
        {"Sid": "EcrLogin", **ECR_LOGIN},
        {
            "Sid": "BuildLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [log_group_arn, f"{log_group_arn}:*"],
        },
    ]
    if artifacts:
        bucket_arn, key_arn = artifacts
        statements += [
            {
                "Sid": "BuildArtifact",
                "Effect": "Allow",
                "Action": "s3:PutObject",
                "Resource": f"{bucket_arn}/{BUILD_ARTIFACTS_PREFIX}/*",
            },
            {
                "Sid": "ArtifactBucketLocation",
                "Effect": "Allow",
                "Action": ["s3:GetBucketAcl", "s3:GetBucketLocation"],
                "Resource": bucket_arn,
            },
            {
                "Sid": "ArtifactKey",
                "Effect": "Allow",
                "Action": "kms:GenerateDataKey",
                "Resource": key_arn,
            },
        ]
    if connection_arn:
        statements.append(
            {
                "Sid": "GitHubConnection",
                "Effect": "Allow",
                "Action": [
                    "codeconnections:GetConnectionToken",
                    "codeconnections:UseConnection",
                ],
                "Resource": connection_arn,
            }
        )
    return _document(statements)


def tls_only_policy(bucket_arn: str) -> str:
    """Bucket policy refusing every request to the bucket that does not use TLS."""
    return _document(
        [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
    )


def kms_key_policy(key_arn: str, actions: list[str]) -> str:
    """Use of one KMS key (e.g. the EKS control plane encrypting secrets)."""
    return _document([{"Effect": "Allow", "Action": sorted(actions), "Resource": key_arn}])


def start_build_policy(project_arn: str) -> str:
    """EventBridge's nightly rule may start this one project."""
    return _document(
        [{"Effect": "Allow", "Action": "codebuild:StartBuild", "Resource": project_arn}]
    )
