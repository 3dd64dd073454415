"""`trainstack data prepare --to URI [options] [overrides ...]`

Compose the job config (`data.path=... data.tokenizer=... data.format=chat`), then tokenize
the sources into shards and a manifest at `--to`: here (`backend=local`, the default), as a
Kubernetes Indexed Job (`backend=kubernetes`), or as that Job's YAML (`backend=render`).
Bad input is one line on stderr and exit 2, with nothing committed or submitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from contract.config import DataConfig
from jobs.backend_registry import traits_of
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.client.api import connect
from jobs.backends.kubernetes.client.batch import progress, submit_job, wait_job
from jobs.backends.kubernetes.client.ecr import resolve_digest
from jobs.backends.kubernetes.data_prepare import PrepareJobSpec, job_name, to_manifests
from jobs.backends.kubernetes.manifest_checks import ManifestError
from jobs.backends.kubernetes.manifests import to_yaml
from jobs.commands import arguments
from jobs.commands.arguments import DEFAULT_SLICES
from jobs.compose import compose
from jobs.errors import EXIT_BAD_INPUT, JobConfigError, one_line
from jobs.grants import check_urls
from jobs.schema import plain
from jobs.submission import git_sha
from trainer.errors import ConfigError
from trainer.storage import StorageError

add_arguments = arguments.data
"""The CLI builds the parser with it; completion reads jobs.commands.arguments alone."""


def fail(message: str) -> int:
    print(f"trainstack data prepare: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    try:
        cfg = compose(list(args.overrides))
        data = plain(cfg.data)
    except (HydraException, OmegaConfBaseException) as err:
        return fail(one_line(err))
    data["tokenizer"] = data["tokenizer"] or "byte"
    if not traits_of(cfg.backend.name).pods:
        return _here(args, data)
    try:
        return _on_cluster(args, cfg, data)
    except (BackendError, ManifestError, ValueError) as err:
        return fail(str(err))


def _here(args: argparse.Namespace, data: dict) -> int:
    from trainer.data.prepare import PrepareRequest, prepare  # lazy: tokenizers, for local only

    request = PrepareRequest(
        DataConfig(**data), args.to, args.slices or 1, args.workers, args.chunk_mb
    )
    try:
        summary = prepare(request)
    except (ConfigError, StorageError) as err:
        return fail(str(err))
    print(summary.line())
    return 0


def _on_cluster(args: argparse.Namespace, cfg, data: dict) -> int:
    for key, value in (("--to", args.to), ("data.path", data["path"])):
        if not str(value).startswith("s3://"):
            raise ValueError(
                f"{key}: {value!r} is not on S3; backend={cfg.backend.name} pods read sources "
                "and write shards through s3:// URIs only"
            )
    tokenizer = data["tokenizer"]
    urls = [("--to", args.to, True), ("data.path", data["path"], False)]
    urls.append(("data.tokenizer", tokenizer, False))
    try:
        check_urls(plain(cfg.storage.grants)["data_prepare"], "data_prepare", urls)
    except JobConfigError as err:
        raise ValueError(str(err)) from None
    if tokenizer != "byte" and not (tokenizer.startswith("s3://") or Path(tokenizer).is_absolute()):
        raise ValueError(
            f"data.tokenizer: {tokenizer!r}; a pod needs byte, s3://bucket/prefix or an absolute "
            "path inside the image"
        )
    image = cfg.job.image or (
        f"{cfg.job.image_repository}:{git_sha()}" if cfg.job.image_repository else None
    )
    if not image:
        raise ValueError(
            "job.image: the pods need the trainer image; set job.image or select a stack "
            "(job.image_repository)"
        )
    submits = traits_of(cfg.backend.name).submits
    if submits and not args.dryrun:
        # Pinned as a training job's pods are: every index and retry runs the same bits.
        image = resolve_digest(image)
    slices = args.slices or DEFAULT_SLICES
    spec = PrepareJobSpec(
        name=job_name(data, args.to, slices),
        namespace=cfg.cluster.namespace,
        image=image,
        service_account=cfg.cluster.data_prepare_service_account,
        data=data,
        to=args.to,
        slices=slices,
        parallelism=args.parallelism,
        retries_per_index=args.retries,
        cpus=args.cpus,
        memory=args.memory,
        chunk_mb=args.chunk_mb,
        region=cfg.cluster.region,
        kubernetes_version=cfg.cluster.kubernetes_version,
        ttl_seconds_after_finished=cfg.job.ttl_seconds_after_finished,
    )
    manifests = to_manifests(spec)
    text = to_yaml(manifests)
    if args.dryrun:
        print(text, end="")
        return 0
    if not submits:  # written out only (backend=render)
        path = Path(cfg.backend.output_root) / spec.name / "manifests.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"{spec.name}: wrote {path} (kubectl apply -f {path})")
        return 0
    return _submit(cfg, manifests[0], wait=args.wait)


def _submit(cfg, job: dict, wait: bool) -> int:
    cluster = connect(cfg.cluster.kubeconfig, cfg.cluster.context, cfg.cluster.namespace)
    outcome, submitted = submit_job(cluster, job)
    name = job["metadata"]["name"]
    print(f"{name}: {outcome}; {progress(submitted).line()}")
    if not wait:
        return 0
    final = wait_job(cluster, name, cfg.backend.poll_interval_s, lambda p: print(p.line()))
    return 0 if final.state == "Succeeded" else 1
