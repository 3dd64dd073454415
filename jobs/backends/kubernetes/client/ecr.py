"""Pin ECR images to digests, so every pod of a run (and every restart) runs the same bits.

A tag can be moved between submit and a pod's restart days later; a digest cannot. Images in
other registries are left as they are. The ECR endpoint follows boto3's standard settings
(`AWS_ENDPOINT_URL_ECR` / `AWS_ENDPOINT_URL`), which is how tests reach moto.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

from jobs.backends.kubernetes.client.api import ClusterError
from jobs.backends.kubernetes.client.kinds import BY_KIND

ECR_IMAGE = re.compile(
    r"^(?P<registry>(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?)"
    r"/(?P<repository>[a-z0-9._/-]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$"
)


def resolve_digest(image: str, ecr_client=None) -> str:
    """`<registry>/<repo>@sha256:...` for an ECR `<registry>/<repo>:<tag>`; others unchanged."""
    match = ECR_IMAGE.match(image)
    if not match:
        return image
    if ecr_client is None:
        import boto3  # lazy: start-up (boto3)

        ecr_client = boto3.client("ecr", region_name=match["region"])
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
    )  # lazy: start-up (boto3)

    try:
        found = ecr_client.describe_images(
            registryId=match["account"],
            repositoryName=match["repository"],
            imageIds=[{"imageTag": match["tag"]}],
        )
    except (ClientError, BotoCoreError) as exc:
        raise ClusterError(
            f"job.image {image}: cannot resolve the tag to a digest in ECR: "
            f"{' '.join(str(exc).split())}"
        ) from exc
    details = found.get("imageDetails") or []
    if not details:
        raise ClusterError(f"job.image {image}: tag {match['tag']!r} not found in ECR")
    return f"{match['registry']}/{match['repository']}@{details[0]['imageDigest']}"


def pin_images(
    manifests: list[dict], ecr_client=None, resolve: Callable[[str], str] | None = None
) -> list[dict]:
    """Copies of `manifests` with every ECR container image of the job (a PyTorchJob's
    containers, a TrainJob's trainer image and initializer) pinned (`resolve(image)`:
    resolve_digest with `ecr_client` unless given)."""
    resolve = resolve or (lambda image: resolve_digest(image, ecr_client))
    pinned = copy.deepcopy(manifests)
    resolved: dict[str, str] = {}

    def pin(holder: dict) -> None:
        image = holder.get("image", "")
        if image not in resolved:
            resolved[image] = resolve(image)
        holder["image"] = resolved[image]

    for manifest in pinned:
        kind = BY_KIND.get(manifest.get("kind", ""))
        for holder in kind.image_holders(manifest) if kind else ():
            pin(holder)
    return pinned
