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


def assume_role_policy(
    service: str, *, tag_session: bool = False, source_account: str | None = None
) -> str:
    """Trust policy letting one AWS service principal assume the role; with `source_account`,
    only on behalf of that account (the confused-deputy guard AWS asks for on Pod Identity)."""
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else "sts:AssumeRole"
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}
    if source_account:
        statement["Condition"] = {"StringEquals": {"aws:SourceAccount": source_account}}
    return _document([statement])


def _list_runs(bucket_arn: str, prefix: str) -> dict:
    """Listing the bucket, only under `<prefix>/`."""
    return {
        "Sid": "ListRuns",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": bucket_arn,
        "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}},
    }


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
            _list_runs(bucket_arn, prefix),
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


def fsx_s3_access_role_arn(partition: str, account: str, file_system_id: str) -> str:
    """The service-linked role FSx for Lustre uses to reach a linked bucket (one per file
    system)."""
    return (
        f"arn:{partition}:iam::{account}:role/aws-service-role/"
        f"s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_{file_system_id}"
    )


def bucket_key_policy(
    partition: str,
    account: str,
    region: str,
    bucket_arn: str,
    *,
    bucket_keys: bool,
    fsx_file_system_id: str | None = None,
) -> str:
    """Key policy of the runs bucket's KMS key: the account's IAM policies govern its use (KMS's
    default statement) and, when FSx links the bucket, FSx's S3-access role may use the key
    through S3 only, for this bucket only (AWS FSx for Lustre guide, SSE-KMS buckets). With S3
    bucket keys on, S3 asks KMS with the bucket's ARN as encryption context, else the object's."""
    statements = [
        {
            "Sid": "AccountIamPolicies",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    if fsx_file_system_id:
        via_s3 = {"kms:CallerAccount": account, "kms:ViaService": f"s3.{region}.amazonaws.com"}
        context_key = "kms:EncryptionContext:aws:s3:arn"
        condition = (
            {"StringEquals": {**via_s3, context_key: bucket_arn}}
            if bucket_keys
            else {"StringEquals": via_s3, "StringLike": {context_key: f"{bucket_arn}/*"}}
        )
        statements.append(
            {
                "Sid": "FsxLinkedBucketThroughS3",
                "Effect": "Allow",
                "Principal": {
                    "AWS": fsx_s3_access_role_arn(partition, account, fsx_file_system_id)
                },
                "Action": [
                    "kms:Decrypt",
                    "kms:DescribeKey",
                    "kms:Encrypt",
                    "kms:GenerateDataKey*",
                    "kms:ReEncrypt*",
                ],
                "Resource": "*",
                "Condition": condition,
            }
        )
    return _document(statements)


def training_api_policy(bucket_arn: str, prefix: str, kms_key_arn: str, repository_arn: str) -> str:
    """The Training API's pods: read run dirs (metrics, configs) under `<bucket>/<prefix>/`, and
    look up the trainer image's digest (jobs/k8s/ecr.py); no writes, no pulls."""
    return _document(
        [
            {
                "Sid": "ReadRunObjects",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"{bucket_arn}/{prefix}/*",
            },
            _list_runs(bucket_arn, prefix),
            {
                "Sid": "BucketKey",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": kms_key_arn,
            },
            {
                "Sid": "TrainerImageDigests",
                "Effect": "Allow",
                "Action": "ecr:DescribeImages",
                "Resource": repository_arn,
            },
        ]
    )
