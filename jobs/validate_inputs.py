"""Checks on what a job reads and writes: `storage.*` (run dirs, FSx), the input paths
(data, tokenizer, init_from, resume_from) where the job runs, and the S3 grants."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jobs.errors import JobConfigError
from jobs.grants import check_urls
from jobs.references import DNS1123_SUBDOMAIN
from jobs.resume_from import resume_from_path
from jobs.run_dirs import on_fsx
from jobs.schema import plain
from jobs.spec import CONFIG_MOUNT_DIR, elastic_of
from jobs.validate_common import in_pods


def check_storage(cfg: Any) -> None:
    root = cfg.storage.root
    multi_node = cfg.compute.nodes > 1 or elastic_of(cfg) is not None
    if multi_node and not root.startswith("s3://"):
        raise JobConfigError(
            "storage.root",
            f"a multi-node job needs storage every node "
            f"shares; allowed: s3://bucket/prefix, got {root!r}",
        )
    # Every s3:// URL names a plain bucket: an access point or Outposts ARN would make
    # botocore contact a host the value names, with this machine's credentials.
    urls = [("storage.root", root)] + [(key, value) for key, value, _ in input_paths(cfg)]
    for key, url in urls:
        if not str(url).startswith("s3://"):
            continue
        bucket = url.removeprefix("s3://").split("/", 1)[0]
        if key == "storage.root":
            problem = bucket_name_problem(bucket)
        else:  # an input: only what is not a plain bucket name at all (an ARN, a host)
            plain = bool(bucket) and set(bucket) <= _BUCKET_CHARS
            problem = None if plain else "is not a bucket name"
        if problem:
            raise JobConfigError(
                key,
                f"{url!r}: bucket {bucket!r} {problem}; allowed: s3://bucket[/prefix], the "
                "bucket 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a "
                "letter or digit (no ARNs)",
            )


S3_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]\Z")


_BUCKET_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789.-")


def bucket_name_problem(bucket: str) -> str | None:
    """Why `bucket` cannot be an S3 bucket name (AWS's general-purpose naming rules), or
    None."""
    if not bucket:
        return "is missing"
    if not 3 <= len(bucket) <= 63:
        count = f"{len(bucket)} character" + ("s" if len(bucket) != 1 else "")
        return f"is {count} long (S3 bucket names are 3-63)"
    if not S3_BUCKET_NAME.match(bucket):
        return "has a character S3 bucket names do not allow, or starts or ends with one"
    if ".." in bucket:
        return "has two dots in a row"
    return None


IMAGE_WORKDIR = "/workspace"


IMAGE_FILES = ("data/sample/train.jsonl",)
"""Files the trainer image carries under its working directory (images/trainer/Dockerfile)."""


def inside_image(path: str) -> bool:
    return path.removeprefix(f"{IMAGE_WORKDIR}/").removeprefix("./") in IMAGE_FILES


def input_paths(cfg: Any) -> list[tuple[str, str, str]]:
    """(key, value, what is allowed) of every input path the trainer reads; the tokenizer
    defaults to the init_from directory's."""
    allowed = (
        "a JSONL file or prepared dataset (manifest.json or its directory), or s3://bucket/key"
    )
    paths = [("data.path", cfg.data.path, allowed)] if cfg.data.path is not None else []
    for index, source in enumerate(cfg.data.mixture):
        allowed = "a prepared dataset (its manifest.json or directory) or s3://bucket/prefix"
        paths.append((f"data.mixture[{index}].path", source.path, allowed))
    if cfg.model.init_from is not None and not cfg.model.init_from.startswith("hf://"):
        allowed = "a Hugging Face model directory, s3://bucket/prefix or hf://org/name[@rev]"
        paths.append(("model.init_from", cfg.model.init_from, allowed))
    resume_from = resume_from_path(cfg)
    if resume_from is not None:
        allowed = "a run dir or its checkpoints/step-N (local or s3://), or RUN[/step-N]"
        paths.append(("trainer.resume_from", resume_from, allowed))
    if cfg.data.tokenizer not in (None, "byte"):
        allowed = "byte, or a local Hugging Face tokenizer directory, or s3://bucket/prefix"
        paths.append(("data.tokenizer", cfg.data.tokenizer, allowed))
    return paths


def check_fsx(cfg: Any) -> None:
    """storage.fsx mounts the stack's FSx volume: there must be one, and pods to mount it in."""
    storage = cfg.storage
    if not storage.fsx:
        return
    if not in_pods(cfg):
        raise JobConfigError(
            "storage.fsx", "FSx is mounted in cluster pods; allowed with backend=local: false"
        )
    if not storage.fsx_claim:
        raise JobConfigError(
            "storage.fsx",
            "the stack has no FSx file system (its output fsx_claim is null: set trainstack:fsx "
            "and re-run `python -m infra.stack_defaults`); allowed: false",
        )
    for key, value in (("storage.fsx_claim", storage.fsx_claim),):
        if not DNS1123_SUBDOMAIN.match(value):
            raise JobConfigError(key, f"{value!r} is not allowed; allowed: a DNS-1123 name")
    if not re.fullmatch(r"/[\w.-]+(/[\w.-]+)*", storage.fsx_mount) or storage.fsx_mount in (
        "/tmp",
        "/dev/shm",
        CONFIG_MOUNT_DIR,
    ):
        raise JobConfigError(
            "storage.fsx_mount",
            f"{storage.fsx_mount!r} is not allowed; allowed: an absolute path other than /tmp, "
            f"/dev/shm and {CONFIG_MOUNT_DIR}",
        )


def check_pod_paths(cfg: Any) -> None:
    """render/kubernetes: every input must be readable in the pod — s3://, a file the image
    carries, or (storage.fsx) a path on the stack's FSx mount; a path on this machine would
    fail the pod at start."""
    if not in_pods(cfg):
        return
    for key, value, _ in input_paths(cfg):
        if value.startswith("s3://") or (key == "data.path" and inside_image(value)):
            continue
        if on_fsx(cfg, value):
            continue
        raise JobConfigError(
            key,
            f"{value!r} is a path on this machine, not inside the trainer image (which carries "
            f"only {', '.join(IMAGE_FILES)}); allowed for backend={cfg.backend.name}: "
            "s3://bucket/prefix",
        )


def check_grants(cfg: Any) -> None:
    """render/kubernetes: every s3:// URL the pods read, and the run dirs they write, must be
    inside the stack's grants for training pods (jobs/grants.py)."""
    if not in_pods(cfg):
        return

    urls = [(key, value, False) for key, value, _ in input_paths(cfg)]
    urls.append(("storage.root", f"{cfg.storage.root.rstrip('/')}/", True))
    check_urls(plain(cfg.storage.grants)["training"], "training", urls)


def check_local_files(cfg: Any) -> None:
    """local: the inputs must be here already; the trainer would find out only after torchrun
    started."""
    if in_pods(cfg):
        return
    for key, value, allowed in input_paths(cfg):
        if key == "trainer.resume_from":  # check_resume_from names the missing run or step
            continue
        path = Path(value)
        is_data = key.startswith("data.") and key != "data.tokenizer"
        if value.startswith("s3://") or path.is_dir() or (is_data and path.is_file()):
            continue
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        what = "file or directory" if is_data else "directory"
        raise JobConfigError(key, f"no such {what} {value!r}{where}; allowed: {allowed}")
