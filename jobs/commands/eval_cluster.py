"""`trainstack eval RUN backend=kubernetes|render [--step N] eval.tasks=[...] ...`: the
checkpoint scored by an eval Job on one GPU of a GPU node (jobs/backends/kubernetes/eval_job.py),
submitted, or written out as its YAML (backend=render).

Checked here, before anything is created, one line naming what to change: the eval.* values
(as on this machine), what a pod cannot do (`--endpoint`, `eval.include_path`: a directory of
this machine), compute (a GPU instance type of the catalog: `compute=<type>`, one of its GPUs),
the run dir (on S3, with a committed checkpoint at `--step` and the run's config to export it
with), the image, and the task names where lm-eval is installed here (its index of its own
tasks, about 30 s; without it the pod checks them and its Job fails at once, exit 2).

The Job itself is jobs/backends/kubernetes/eval_job.py's (`eval_template`), the one
`launch --wait eval.every_checkpoint=true` submits per checkpoint (eval_schedule.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from contract.config import EXIT_BAD_INPUT
from contract.run_dir import CONFIG_FILE
from jobs.backend_registry import traits_of
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.client.api import ClusterError, connect
from jobs.backends.kubernetes.client.batch import submit_job
from jobs.backends.kubernetes.client.ecr import resolve_digest
from jobs.backends.kubernetes.eval_job import eval_template, gpu_instance, to_manifests
from jobs.backends.kubernetes.eval_schedule import eval_image
from jobs.backends.kubernetes.manifest_checks import ManifestError
from jobs.backends.kubernetes.manifests import to_yaml
from jobs.commands.run_lookup import existing_run_dir, fail
from jobs.compose import compose
from jobs.errors import JobConfigError, one_line
from jobs.grants import check_urls
from jobs.schema import plain
from trainer.checkpoint.layout import committed_steps
from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig
from trainer.evaluation.results import EVAL_DIR, eval_name
from trainer.storage import StorageError, open_run_storage


def check_pod_settings(settings: EvalConfig, endpoint: str | None, cfg: Any) -> None:
    """What a pod cannot be asked: a server or a directory only this machine has."""
    where = f"backend={cfg.backend.name}"
    if endpoint is not None:
        raise ConfigError(
            f"--endpoint: not with {where} (the pod scores the checkpoint's export itself); "
            "allowed: backend=local with --endpoint"
        )
    if settings.include_path is not None:
        raise ConfigError(
            f"eval.include_path: {settings.include_path!r} is this machine's directory, which "
            f"a pod of {where} cannot read; allowed: lm-eval's own tasks, or backend=local"
        )


def checkpoint_to_score(run_dir: str, step: int | None) -> int:
    """The committed checkpoint at `step` (default: the newest), of a run whose config says
    how to export it; ConfigError otherwise."""
    if not run_dir.startswith("s3://"):
        raise ConfigError(
            f"RUN: {run_dir} is not on S3; the eval pod reads the run dir through an s3:// URI "
            "(a cluster run's storage.root)"
        )
    try:
        storage = open_run_storage(run_dir)
        steps = committed_steps(storage)
        exportable = storage.exists(CONFIG_FILE)
    except StorageError as exc:
        raise ConfigError(f"RUN: {exc}") from None
    if not steps:
        raise ConfigError(f"--step: {run_dir} has no committed checkpoint")
    if step is not None and step not in steps:
        listed = ", ".join(map(str, steps))
        raise ConfigError(f"--step: no committed checkpoint at step {step}; committed: {listed}")
    if not exportable:
        raise ConfigError(
            f"RUN: {run_dir} has no {CONFIG_FILE} (the run's config): its checkpoints cannot "
            "be exported for lm-eval"
        )
    return steps[-1] if step is None else step


def check_task_names(settings: EvalConfig) -> None:
    """Against lm-eval's index here when it is installed; else the pod checks them."""
    if importlib.util.find_spec("lm_eval") is None:
        print(
            "trainstack eval: lm-eval is not installed here; the pod checks the task names",
            file=sys.stderr,
        )
        return
    from trainer.evaluation.tasks import task_manager  # lazy: lm-eval (~3 s + its index)

    task_manager(settings)


def run_on_cluster(
    args: argparse.Namespace, settings: EvalConfig, cfg: Any, rest: list[str]
) -> int:
    try:
        check_pod_settings(settings, args.endpoint, cfg)
        gpu_instance(cfg)
        run_dir = existing_run_dir(args.run_id, rest)
        step = checkpoint_to_score(run_dir, args.step)
        # The pod runs as the run's service account: its role must reach the run dir.
        check_urls(plain(cfg.storage.grants)["training"], "training", [("RUN", run_dir, True)])
        image = eval_image(cfg)
        check_task_names(settings)
        run_id = PurePosixPath(run_dir.rstrip("/")).name
        spec = eval_template(cfg, run_id, run_dir, settings, image).at(step)
        submits = traits_of(cfg.backend.name).submits
        if submits:  # pinned as a training job's pods are: a retry runs the same bits
            spec = replace(spec, image=resolve_digest(spec.image))
        manifests = to_manifests(spec)
    except (ConfigError, BackendError, JobConfigError, ManifestError, ValueError) as err:
        return fail("eval", str(err), EXIT_BAD_INPUT)
    results = f"{run_dir.rstrip('/')}/{EVAL_DIR}/{eval_name(step, via_endpoint=False)}/"
    if not submits:  # written out only (backend=render)
        path = Path(cfg.backend.output_root) / spec.name / "manifests.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_yaml(manifests))
        print(f"{spec.name}: wrote {path} (kubectl apply -f {path}); results to {results}")
        return 0
    try:
        cluster = connect(cfg.cluster.kubeconfig, cfg.cluster.context, cfg.cluster.namespace)
        outcome, _ = submit_job(cluster, manifests[0])
    except ClusterError as err:
        return fail("eval", str(err))
    print(
        f"{spec.name}: {outcome} in namespace {cfg.cluster.namespace} (step {step} of "
        f"{run_id} on one GPU of {spec.instance_type}); results to {results}"
    )
    return 0


def composed(rest: list[str]) -> Any:
    """The config `rest` (backend=..., stack=..., compute=...) composes; ConfigError."""
    try:
        return compose(list(rest))
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(one_line(err)) from None
