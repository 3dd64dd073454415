"""The ECR repository for the trainer image: immutable tags, scan on push, KMS-encrypted,
untagged images expire."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

BUILD_CACHE_TAG = "buildcache"
"""The one mutable tag: must match BUILD_CACHE_REF's default in images/build.sh."""


def untagged_expiry_policy(days: int) -> str:
    return json.dumps(
        {
            "rules": [
                {
                    "rulePriority": 1,
                    "description": f"expire untagged images after {days} days",
                    "selection": {
                        "tagStatus": "untagged",
                        "countType": "sinceImagePushed",
                        "countUnit": "days",
                        "countNumber": days,
                    },
                    "action": {"type": "expire"},
                }
            ]
        }
    )


class Registry(pulumi.ComponentResource):
    repository_arn: pulumi.Output[str]
    repository_url: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        repository_name: str,
        untagged_days: int,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:Registry", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        key = aws.kms.Key(
            f"{name}-images",
            description=f"ECR encryption for {repository_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=child,
        )
        repository = aws.ecr.Repository(
            f"{name}-trainer",
            name=repository_name,
            # Every release tag is immutable; only the BuildKit layer-cache tag is rewritten
            # by each build (images/build.sh), so it alone is excluded.
            image_tag_mutability="IMMUTABLE_WITH_EXCLUSION",
            image_tag_mutability_exclusion_filters=[
                {"filter": BUILD_CACHE_TAG, "filter_type": "WILDCARD"}
            ],
            image_scanning_configuration={"scan_on_push": True},
            encryption_configurations=[{"encryption_type": "KMS", "kms_key": key.arn}],
            opts=child,
        )
        aws.ecr.LifecyclePolicy(
            f"{name}-untagged",
            repository=repository.name,
            policy=untagged_expiry_policy(untagged_days),
            opts=child,
        )
        self.repository_arn = repository.arn
        self.repository_url = repository.repository_url
        self.register_outputs({"repository_url": self.repository_url})
