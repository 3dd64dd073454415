"""The ECR repositories of the trainer image.

Two repositories, because they need opposite rules:
- the release repository holds every image a cluster may run: `IMMUTABLE` outright (no tag is
  ever rewritten, not even a cache tag), scanned on push, KMS-encrypted;
- the build-cache repository holds BuildKit's layer cache, whose one tag each main build
  rewrites. It is mutable and holds nothing a cluster runs, so a poisoned cache can at worst
  slow a build down, never change a released image's digest. Only the release build role may
  write it (its repository policy, `infra/ci.py`).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.protection import stateful
from infra.settings.types import DataProtection

BUILD_CACHE_TAG = "buildcache"
"""The cache repository's one tag: must match BUILD_CACHE_TAG in images/build.sh."""
CACHE_REPOSITORY_SUFFIX = "-buildcache"


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


def cache_repository_name(repository_name: str) -> str:
    return f"{repository_name}{CACHE_REPOSITORY_SUFFIX}"


class Registry(pulumi.ComponentResource):
    repository_arn: pulumi.Output[str]
    repository_url: pulumi.Output[str]
    repository_name: pulumi.Output[str]
    cache_repository_arn: pulumi.Output[str]
    cache_repository_url: pulumi.Output[str]
    cache_repository_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        repository_name: str,
        untagged_days: int,
        protection: DataProtection,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`protection`: the images key is stateful (every image is encrypted with it), so it is
        protected and retained like the runs bucket's key."""
        super().__init__("trainstack:infra:Registry", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        key = aws.kms.Key(
            f"{name}-images",
            description=f"ECR encryption for {repository_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=stateful(self, protection),
        )
        encryption = [{"encryption_type": "KMS", "kms_key": key.arn}]
        repository = aws.ecr.Repository(
            f"{name}-trainer",
            name=repository_name,
            # No exclusion: a pushed tag (git SHA, version, nightly-DATE-SHA) is never rewritten.
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            encryption_configurations=encryption,
            opts=child,
        )
        cache = aws.ecr.Repository(
            f"{name}-buildcache",
            name=cache_repository_name(repository_name),
            # The cache tag is rewritten by every main build; nothing here is ever deployed.
            image_tag_mutability="MUTABLE",
            image_scanning_configuration={"scan_on_push": False},
            encryption_configurations=encryption,
            # Disposable by design: a stack teardown may drop it with its content.
            force_delete=True,
            opts=child,
        )
        for repo, suffix in ((repository, "untagged"), (cache, "cache-untagged")):
            aws.ecr.LifecyclePolicy(
                f"{name}-{suffix}",
                repository=repo.name,
                policy=untagged_expiry_policy(untagged_days),
                opts=child,
            )
        self.repository_arn = repository.arn
        self.repository_url = repository.repository_url
        self.repository_name = repository.name
        self.cache_repository_arn = cache.arn
        self.cache_repository_url = cache.repository_url
        self.cache_repository_name = cache.name
        self.register_outputs(
            {
                "repository_url": self.repository_url,
                "cache_repository_url": self.cache_repository_url,
            }
        )
