"""The S3 bucket for runs (checkpoints, metrics, configs): private, owner-enforced, versioned,
SSE-KMS with a bucket key, TLS only, with lifecycle rules that bound what old versions and
abandoned multipart uploads cost."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.bucket_layout import RUNS
from infra.policies import tls_only_policy
from infra.protection import stateful
from infra.settings.types import DataProtection

NONCURRENT_DAYS = 30
MULTIPART_DAYS = 7
BUCKET_KEYS = True
"""S3 bucket keys: one data key per bucket, not per object (far fewer KMS calls); KMS then sees
the bucket's ARN, not the object's, as encryption context (key policies depend on it)."""


class RunStorage(pulumi.ComponentResource):
    bucket: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    key_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        protection: DataProtection,
        kms_key_arn: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`kms_key_arn`: encrypt with this existing key instead of creating one."""
        super().__init__("trainstack:infra:RunStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if kms_key_arn is None:
            key = aws.kms.Key(
                f"{name}-runs",
                description="trainstack runs bucket encryption",
                enable_key_rotation=True,
                deletion_window_in_days=protection.kms_deletion_window_days,
                opts=stateful(self, protection),
            )
            key_arn, key_id = key.arn, key.key_id
        else:
            key_arn = pulumi.Output.from_input(kms_key_arn)
            key_id = pulumi.Output.from_input(kms_key_arn.rsplit("/", 1)[1])
        # force_destroy stays off even unprotected: a bucket holding objects is never deleted.
        bucket = aws.s3.Bucket(f"{name}-runs", force_destroy=False, opts=stateful(self, protection))
        public_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-runs",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-runs",
            bucket=bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-runs",
            bucket=bucket.id,
            versioning_configuration={"status": "Enabled"},
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-runs",
            bucket=bucket.id,
            rules=[
                {
                    "apply_server_side_encryption_by_default": {
                        "sse_algorithm": "aws:kms",
                        "kms_master_key_id": key_arn,
                    },
                    "bucket_key_enabled": BUCKET_KEYS,
                }
            ],
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-runs",
            bucket=bucket.id,
            rules=[
                {
                    "id": "abort-incomplete-multipart-uploads",
                    "status": "Enabled",
                    "filter": {},
                    "abort_incomplete_multipart_upload": {"days_after_initiation": MULTIPART_DAYS},
                },
                {
                    "id": "expire-noncurrent-versions",
                    "status": "Enabled",
                    "filter": {},
                    "noncurrent_version_expiration": {"noncurrent_days": NONCURRENT_DAYS},
                },
            ],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]),
        )
        aws.s3.BucketPolicy(
            f"{name}-runs",
            bucket=bucket.id,
            policy=bucket.arn.apply(tls_only_policy),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[public_block]),
        )
        self.bucket = bucket.bucket
        self.bucket_arn = bucket.arn
        self.key_arn = key_arn
        self.key_id = key_id
        self.root = pulumi.Output.concat("s3://", bucket.bucket, f"/{RUNS}")
        self.register_outputs({"bucket": self.bucket, "root": self.root})
