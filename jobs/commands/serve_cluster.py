"""`trainstack serve-model RUN backend=render|kubernetes [--down] [overrides ...]`: the cluster
form of serve-model (jobs/commands/serve_model.py keeps the local one, the default).

The run's export (`<run_dir>/export/`, what `trainer.export_hf=true` writes at the end: full
weights, or a LoRA run's PEFT adapter) served by vLLM (jobs/backends/kubernetes/serving.py):
`backend=render` writes the manifests to `<backend.output_root>/<run>-serve/manifests.yaml`;
`backend=kubernetes` applies them, binds the serving role to the run's ServiceAccount where the
stack has one (`cluster.serving_role_arn`) and prints the Service's in-cluster URL; `--down`
deletes exactly those objects (by label) and the binding. The GPUs are `compute=<instance
type>` and `compute.gpus_per_node=N`. Bad input is one line and exit 2, before anything is
written or applied.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from jobs.backend_registry import traits_of
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.client import serving as serving_client
from jobs.backends.kubernetes.client.api import connect
from jobs.backends.kubernetes.manifest_checks import ManifestError
from jobs.backends.kubernetes.manifests import to_yaml
from jobs.backends.kubernetes.serving import (
    KINDS,
    ServingSpec,
    selector,
    service_account_name,
    serving_name,
    to_manifests,
    url,
)
from jobs.commands.run_lookup import existing_run_dir
from jobs.schema import CAPACITY_TYPES
from jobs.submission import git_sha
from trainer.storage import StorageError, open_run_storage

EXPORT = "export"
FULL_MARKER = "config.json"
ADAPTER_MARKER = "adapter_config.json"


class ServeInputError(ValueError):
    """Bad input: one line naming the key, exit 2."""


def wanted(cfg: Any) -> bool:
    """The cluster form: the composed backend runs pods (render or kubernetes)."""
    return traits_of(cfg.backend.name).pods


def _run_id(run_dir: str) -> str:
    return run_dir.rstrip("/").rsplit("/", 1)[-1]


def lora_base(run_dir: str) -> str | None:
    """The export's base model when it is a LoRA adapter, None for full weights; bad input
    (ServeInputError) when the run has no export a server can read."""
    try:
        storage = open_run_storage(run_dir)
        if storage.exists(f"{EXPORT}/{FULL_MARKER}"):
            return None
        if not storage.exists(f"{EXPORT}/{ADAPTER_MARKER}"):
            raise ServeInputError(
                f"RUN: {run_dir} has no export ({EXPORT}/{FULL_MARKER} or "
                f"{EXPORT}/{ADAPTER_MARKER}); launch with trainer.export_hf=true, or "
                f"`trainstack export RUN --to {run_dir}/{EXPORT}`"
            )
        adapter = json.loads(storage.read_text(f"{EXPORT}/{ADAPTER_MARKER}"))
    except StorageError as err:
        raise ServeInputError(f"RUN: {err}") from None
    base = str(adapter.get("base_model_name_or_path") or "")
    if not base or "://" in base or base.startswith("/"):
        raise ServeInputError(
            f"RUN: the export is a LoRA adapter on {base!r}; allowed: a Hugging Face Hub id "
            "(the serving pod reads this run's export alone), or export it merged "
            f"(`trainstack export RUN --merge --to {run_dir}/{EXPORT}`)"
        )
    return base


def _node_group(cfg: Any, instance_type: str) -> str | None:
    groups = list(cfg.cluster.node_groups)
    if not groups:
        return None
    for group in groups:
        if group.instance_type == instance_type:
            return str(group.name)
    allowed = ", ".join(sorted({str(g.instance_type) for g in groups}))
    raise ServeInputError(
        f"compute: {instance_type!r} has no node group in this stack; allowed: {allowed}"
    )


def _image(cfg: Any) -> str:
    image = cfg.job.image or (
        f"{cfg.job.image_repository}:{git_sha()}" if cfg.job.image_repository else None
    )
    if not image:
        raise ServeInputError(
            "job.image: the export is copied by the trainer image; set job.image or select a "
            "stack (job.image_repository)"
        )
    return str(image)


def serving_spec(args: argparse.Namespace, cfg: Any) -> ServingSpec:
    """The request as a ServingSpec; ServeInputError for bad input (nothing read beyond the
    run's export markers)."""
    if args.step is not None:
        raise ServeInputError(
            f"--step: {args.step}; the cluster serves <run_dir>/{EXPORT}/ (the run's final "
            "export): allowed: none (export a step with `trainstack export --step N --to "
            "<run_dir>/export`)"
        )
    instance_type = cfg.compute.instance_type
    if not instance_type:
        raise ServeInputError(
            f"compute: {cfg.compute.name!r}; allowed: a GPU instance type of the catalog "
            "(compute=p5.48xlarge compute.gpus_per_node=1)"
        )
    try:
        run_dir = existing_run_dir(args.run_id, list(args.overrides))
    except BackendError as err:
        raise ServeInputError(f"RUN: {err}") from None
    if not run_dir.startswith("s3://"):
        raise ServeInputError(
            f"RUN: {run_dir} is not on S3; allowed: a run under the stack's storage.root "
            "(s3://): the serving pod copies the export from there"
        )
    run_id = _run_id(run_dir)
    reserved = {cfg.cluster.service_account, cfg.cluster.data_prepare_service_account}
    if service_account_name(run_id) in reserved:
        raise ServeInputError(f"RUN: {run_id!r} is the name of a stack ServiceAccount")
    return ServingSpec(
        run_id=run_id,
        export_uri=f"{run_dir.rstrip('/')}/{EXPORT}",
        namespace=str(cfg.cluster.namespace),
        instance_type=str(instance_type),
        gpus=int(cfg.compute.gpus_per_node),
        fetch_image=_image(cfg),
        region=str(cfg.cluster.region),
        kubernetes_version=str(cfg.cluster.kubernetes_version),
        served_name=args.name or run_id,
        lora_base=lora_base(run_dir),
        node_group=_node_group(cfg, str(instance_type)),
        capacity_type=CAPACITY_TYPES.get(str(cfg.compute.capacity)),
        image=args.image,
        startup_timeout_s=args.startup_timeout,
    )


def run(args: argparse.Namespace, cfg: Any) -> int:
    if args.down:
        return down(args, cfg)
    try:
        spec = serving_spec(args, cfg)
        manifests = to_manifests(spec)
    except (ServeInputError, ManifestError) as err:
        raise ServeInputError(str(err)) from None
    name = serving_name(spec.run_id)
    if not traits_of(cfg.backend.name).submits:  # backend=render: written out only
        path = Path(cfg.backend.output_root) / name / "manifests.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_yaml(manifests))
        print(f"{name}: wrote {path} (kubectl apply -f {path})")
        return 0
    cluster = connect(cfg.cluster.kubeconfig, cfg.cluster.context, spec.namespace)
    role = cfg.cluster.serving_role_arn
    if role:  # EKS: the run's ServiceAccount gets the serving role before its pod starts
        serving_client.associate(
            str(cfg.cluster.name),
            spec.namespace,
            service_account_name(spec.run_id),
            role,
            spec.region,
        )
    applied = serving_client.apply(cluster, manifests, serving_client.dynamic_resources(cluster))
    print(f"{name}: applied {', '.join(applied)} in namespace {spec.namespace}")
    print(f"serving {spec.served_name} at {url(spec)} (OpenAI API; ready once /health answers)")
    return 0


def down(args: argparse.Namespace, cfg: Any) -> int:
    """Delete what serve-model applied for RUN, by label; the Pod Identity binding too."""
    run_id = _run_id(args.run_id)
    if not traits_of(cfg.backend.name).submits:
        raise ServeInputError(f"--down: backend={cfg.backend.name}; allowed: backend=kubernetes")
    namespace = str(cfg.cluster.namespace)
    cluster = connect(cfg.cluster.kubeconfig, cfg.cluster.context, namespace)
    deleted = serving_client.take_down(
        cluster, KINDS, selector(run_id), serving_client.dynamic_resources(cluster)
    )
    if cfg.cluster.serving_role_arn:
        serving_client.dissociate(
            str(cfg.cluster.name), namespace, service_account_name(run_id), cfg.cluster.region
        )
    what = ", ".join(deleted) if deleted else "nothing was there"
    print(f"{serving_name(run_id)}: deleted {what} in namespace {namespace}")
    return 0
