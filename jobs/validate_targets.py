"""Checks of what a job points at outside itself: the image it pulls, the namespace and service
account it runs as, the estimate's inputs, and the directory it writes to. Each raises
`JobConfigError` (one line: key, problem, what is allowed) before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jobs.backends import traits_of
from jobs.errors import JobConfigError
from jobs.references import (
    IMAGE_ALLOWED,
    dns1123_label_problem,
    dns1123_subdomain_problem,
    image_approved,
    image_reference_problem,
)
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


def check_secrets_approved(cfg: Any) -> None:
    """With `cluster.approved_secrets` set, a job mounts only those Secrets: any other one in
    the namespace (the API's token hashes, another team's keys) stays out of its pods."""
    approved = cfg.cluster.approved_secrets
    if approved is None:
        return
    for key, ref in cfg.job.secrets.items():
        if ref.name is not None and ref.name not in approved:
            raise JobConfigError(
                f"job.secrets.{key}.name",
                f"Secret {ref.name!r} is not approved for jobs; allowed: the Secrets listed in "
                "cluster.approved_secrets",
            )


def check_priority_approved(cfg: Any) -> None:
    """With `cluster.approved_priorities` set, a job names only those priority classes: a
    higher one would let it preempt other teams' admitted jobs."""
    approved = cfg.cluster.approved_priorities
    priority = cfg.job.priority
    if approved is None or priority is None or priority in approved:
        return
    allowed = ", ".join(approved) if approved else "none (leave job.priority unset)"
    raise JobConfigError(
        "job.priority", f"{priority!r} is not approved for jobs; allowed: {allowed}"
    )


def check_cluster_names(cfg: Any) -> None:
    """The API server would refuse these only at submit time, after the ConfigMap."""
    cluster = cfg.cluster
    for key, value, problem_of in (
        ("cluster.namespace", cluster.namespace, dns1123_label_problem),
        ("cluster.service_account", cluster.service_account, dns1123_subdomain_problem),
        (
            "cluster.data_prepare_service_account",
            cluster.data_prepare_service_account,
            dns1123_subdomain_problem,
        ),
    ):
        problem = problem_of(value)
        if problem:
            raise JobConfigError(key, f"{value!r} is not allowed; allowed: {problem}")


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


def unwritable_reason(path: Path) -> str | None:
    """Why a directory could not be made (or written) at `path`, without making it."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return "no existing parent directory"
        probe = probe.parent
    if not probe.is_dir():
        return f"{str(probe)!r} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{str(probe)!r} is not writable"
    return None


def check_output_root(cfg: Any) -> None:
    """backend=render writes its manifests under backend.output_root: refuse a root that
    cannot be written before the first file (a half-rendered sweep) instead of a traceback."""
    if not traits_of(cfg.backend.name).writes_output_root:
        return
    root = Path(cfg.backend.output_root)
    reason = unwritable_reason(root)
    if reason:
        raise JobConfigError(
            "backend.output_root",
            f"{str(root)!r} cannot be written ({reason}); allowed: a directory this user "
            "can create or write",
        )
