"""Checks of what a job points at outside itself: the image it pulls (its tag, reference and
approval) and the estimate's inputs (where backend=render writes: jobs/backends/render/). Each
raises `JobConfigError` (one line: key, problem, what is allowed) before anything is written.
"""

from __future__ import annotations

from typing import Any

from jobs.errors import JobConfigError
from jobs.references import IMAGE_ALLOWED, image_approved, image_reference_problem
from jobs.schema import LOCAL_CPU
from jobs.spec import image_for


def check_image_reference(cfg: Any) -> None:
    """job.image / job.image_repository must parse as the registry would parse them: a bad
    digest or a stray space otherwise fails every pod with ErrImagePull/InvalidImageName."""
    image, repository = cfg.job.image, cfg.job.image_repository
    if image is not None:
        problem = image_reference_problem(image)
        if problem:
            raise JobConfigError("job.image", f"{image!r}: {problem}; allowed: {IMAGE_ALLOWED}")
    if repository is not None:
        problem = image_reference_problem(repository, tag_allowed=False)
        if problem:
            raise JobConfigError(
                "job.image_repository",
                f"{repository!r}: {problem}; allowed: REGISTRY/PATH (no tag, no whitespace)",
            )


def check_image_approved(cfg: Any, git_sha: str | None) -> None:
    """With `cluster.approved_images` set (the Training API always sets it), a job runs only
    the stack's repository or an approved registry: a token or a typo must not pull anyone's
    image into a pod with the trainer's IAM role."""

    approved = cfg.cluster.approved_images
    image = image_for(cfg, git_sha)
    if approved is None or image is None:
        return
    if not image_approved(image, cfg.job.image_repository, list(approved)):
        raise JobConfigError(
            "job.image",
            f"{image!r} is not from an approved registry; allowed: the stack's repository "
            "(job.image_repository) or cluster.approved_images",
        )


def check_cost_inputs(cfg: Any) -> None:
    """A negative price or step time would print a negative estimate."""
    compute = cfg.compute
    if compute.hourly_usd is not None and compute.hourly_usd < 0:
        raise JobConfigError(
            "compute.hourly_usd",
            f"{compute.hourly_usd} is negative; allowed: null (the catalog's price) or "
            "USD per node-hour >= 0",
        )
    if compute.step_time_s is not None and compute.step_time_s <= 0:
        raise JobConfigError(
            "compute.step_time_s",
            f"{compute.step_time_s} is not a duration; allowed: null (estimated) or "
            "seconds per step > 0",
        )


def check_image(cfg: Any, git_sha: str | None) -> None:
    if cfg.compute.name == LOCAL_CPU:
        return
    image = cfg.job.image
    if not image:
        if cfg.job.image_repository and git_sha:
            return
        raise JobConfigError(
            "job.image",
            f"backend={cfg.backend.name} needs the trainer image: "
            "set job.image=REPOSITORY:TAG, or job.image_repository (e.g. from "
            "stack=<name>) in a git checkout",
        )
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else None
    if "@" not in image and tag in (None, "latest"):
        raise JobConfigError(
            "job.image",
            f"{image!r} has tag 'latest' (implied when absent), "
            "which is not reproducible; allowed: an immutable tag or @sha256 "
            "digest",
        )
