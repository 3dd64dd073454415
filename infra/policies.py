"""IAM and bucket policy documents as plain functions of resolved ARNs (call them inside
`Output.apply`).

Least privilege: every statement names its resources; the only `*` is
`ecr:GetAuthorizationToken`, which IAM does not scope to a repository.
"""

from __future__ import annotations

import json

from infra.bucket_layout import READWRITE, RUNS, Grant

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

# The runs bucket's prefixes, each owned by one writer (infra/bucket_layout.py; `storage.root`
# for jobs is s3://<bucket>/runs).
BUILD_ARTIFACTS_PREFIX = "image-builds"
"""Bucket prefix for the build's artifact (image.json: URI and digest of each pushed image)."""
RESERVED_PREFIXES = (RUNS, BUILD_ARTIFACTS_PREFIX)


def policy_document(statements: list[dict]) -> str:
    """An IAM policy document (identity, trust or resource policy) of `statements`."""
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def assume_role_policy(
    service: str,
    *,
    tag_session: bool = False,
    source_account: str | None = None,
    source_arn: str | None = None,
) -> str:
    """Trust policy letting one AWS service principal assume the role; with `source_account`
    (and `source_arn`, wildcards allowed), only on behalf of that account (and resource): the
    confused-deputy guard AWS asks for on every service role."""
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else "sts:AssumeRole"
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}
    condition: dict = {}
    if source_account:
        condition["StringEquals"] = {"aws:SourceAccount": source_account}
    if source_arn:
        condition["ArnLike"] = {"aws:SourceArn": source_arn}
    if condition:
        statement["Condition"] = condition
    return policy_document([statement])


def _list_runs(bucket_arn: str, prefix: str) -> dict:
    """Listing the bucket, only under `<prefix>/`."""
    return {
        "Sid": "ListRuns",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": bucket_arn,
        "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}},
    }


OBJECT_READ_ACTIONS = ["s3:GetObject"]
OBJECT_WRITE_ACTIONS = ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:PutObject"]


def _objects(partition: str, grant: Grant) -> str:
    key = f"{grant.prefix}/*" if grant.prefix else "*"
    return f"arn:{partition}:s3:::{grant.bucket}/{key}"


def grant_statements(partition: str, grants: list[Grant], bucket_key_arn: str) -> list[dict]:
    """S3 and KMS statements for `grants`: reads on every granted prefix, writes on read-write
    ones, listing each bucket only under its granted prefixes. A grant without its own KMS key
    is in the stack's bucket, encrypted with `bucket_key_arn`."""
    readable = sorted({_objects(partition, g) for g in grants})
    writable = sorted({_objects(partition, g) for g in grants if g.access == READWRITE})
    statements = [
        {
            "Sid": "ReadObjects",
            "Effect": "Allow",
            "Action": OBJECT_READ_ACTIONS,
            "Resource": readable,
        }
    ]
    if writable:
        statements.append(
            {
                "Sid": "WriteObjects",
                "Effect": "Allow",
                "Action": OBJECT_WRITE_ACTIONS,
                "Resource": writable,
            }
        )
    for index, bucket in enumerate(sorted({g.bucket for g in grants})):
        prefixes = sorted({g.prefix for g in grants if g.bucket == bucket})
        listing = {
            "Sid": f"List{index}",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": f"arn:{partition}:s3:::{bucket}",
        }
        if "" not in prefixes:
            patterns = [p for prefix in prefixes for p in (f"{prefix}/", f"{prefix}/*")]
            listing["Condition"] = {"StringLike": {"s3:prefix": patterns}}
        statements.append(listing)
    # SSE-KMS objects need their key: Decrypt to read, GenerateDataKey to write.
    keys: dict[str, set[str]] = {}
    for grant in grants:
        actions = keys.setdefault(grant.kms_key_arn or bucket_key_arn, {"kms:Decrypt"})
        if grant.access == READWRITE:
            actions.add("kms:GenerateDataKey")
    for index, (key, actions) in enumerate(sorted(keys.items())):
        statements.append(
            {"Sid": f"Key{index}", "Effect": "Allow", "Action": sorted(actions), "Resource": key}
        )
    return statements


def training_policy(
    partition: str, grants: list[Grant], bucket_key_arn: str, repository_arn: str
) -> str:
    """A pod role (training or data-prepare): its grants of the bucket layout
    (infra/bucket_layout.py) and `trainstack:dataAccess`, and pulling the one image."""
    return policy_document(
        [
            *grant_statements(partition, grants, bucket_key_arn),
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
    return policy_document(statements)


def tls_only_policy(bucket_arn: str) -> str:
    """Bucket policy refusing every request to the bucket that does not use TLS."""
    return policy_document(
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
    return policy_document([{"Effect": "Allow", "Action": sorted(actions), "Resource": key_arn}])


def start_build_policy(project_arn: str) -> str:
    """EventBridge's nightly rule may start this one project."""
    return policy_document(
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
                    "kms:Encrypt",
                    "kms:GenerateDataKey*",
                    "kms:ReEncrypt*",
                ],
                "Resource": "*",
                "Condition": condition,
            }
        )
        # DescribeKey carries no encryption context: under the condition above it never
        # matched (parliament's UNKNOWN_CONDITION_FOR_ACTION), so it gets S3's own conditions.
        statements.append(
            {
                "Sid": "FsxLinkedBucketDescribeKey",
                "Effect": "Allow",
                "Principal": {
                    "AWS": fsx_s3_access_role_arn(partition, account, fsx_file_system_id)
                },
                "Action": "kms:DescribeKey",
                "Resource": "*",
                "Condition": {"StringEquals": via_s3},
            }
        )
    return policy_document(statements)


def training_api_policy(bucket_arn: str, prefix: str, kms_key_arn: str, repository_arn: str) -> str:
    """The Training API's pods: read run dirs (metrics, configs) under `<bucket>/<prefix>/`, and
    look up the trainer image's digest (jobs/backends/kubernetes/client/ecr.py); no writes, no
    pulls."""
    return policy_document(
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
