"""Shared by `runs`, `status`, `logs` and `cancel`: which backends hold runs, and finding one.

Runs live in three places: local runs under `storage.root` on this machine, rendered runs
under `backend.output_root` (state "rendered": written, never run), and PyTorchJobs on the
cluster named by `cluster.*` (a stack group or overrides select it). The cluster is asked only
when a kubeconfig is configured or present, or `--backend kubernetes` says so.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from jobs.backend_registry import NAMES, backend_named, traits_of
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.client.api import kubeconfig_file
from jobs.compose import compose
from jobs.run_dirs import run_dir_for
from trainer.storage import StorageError, open_run_storage


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=NAMES,
        help="only this backend (default: local, render, and the cluster when a kubeconfig is "
        "configured)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        default=[],  # else argparse calls it required when RUN is missing
        help="config overrides selecting where runs are, e.g. stack=prod",
    )


def compose_for(overrides: list[str]) -> Any:
    return compose(overrides)


def cluster_configured(cfg: Any) -> bool:
    return os.path.exists(kubeconfig_file(cfg.cluster.kubeconfig)) or bool(
        os.environ.get("KUBERNETES_SERVICE_HOST")
    )


def backends_for(args: argparse.Namespace) -> list[Any]:
    """The backends to consult, in order (local and render first: they answer without the
    network)."""
    cfg = compose_for(args.overrides)
    chosen = (
        [args.backend]
        if args.backend
        else [n for n in NAMES if not traits_of(n).on_cluster or cluster_configured(cfg)]
    )
    return [backend_named(name, cfg) for name in chosen]


def find_run(backends: list[Any], run_id: str) -> tuple[Any, Any]:
    """(backend, RunStatus) of the first backend that knows `run_id`."""
    problems = []
    for backend in backends:
        try:
            return backend, backend.status(run_id)
        except BackendError as err:
            problems.append(str(err))
    raise BackendError(f"run {run_id!r} not found: " + "; ".join(problems))


def run_dir_of(run: str, overrides: list[str]) -> str:
    """RUN as the commands take it: a run id (its dir is `<storage.root>/<RUN>`, storage.root
    composed with `overrides`) or a run dir itself (a path or s3:// URI)."""
    if "/" in run or run.startswith("."):
        return run
    return run_dir_for(compose_for(overrides).storage.root, run)


def existing_run_dir(run: str, overrides: list[str]) -> str:
    """`run_dir_of`, refused in one line (BackendError) when nothing is there: a command that
    reads a run says it has no such run, not that the run has no metrics or checkpoints."""
    run_dir = run_dir_of(run, overrides)
    try:
        storage = open_run_storage(run_dir)
        local = storage.local_path("")
        there = local.is_dir() if local is not None else storage.list_dir("")
    except StorageError as err:
        raise BackendError(str(err)) from err
    except OSError as err:  # a name the file system refuses (too long, say): no such run
        raise BackendError(f"no run {run[:80]!r}: {err.strerror}") from err
    if not there:
        hint = "" if "/" in run else " (`trainstack runs` lists the runs here)"
        raise BackendError(f"no run {run!r}: nothing at {run_dir}{hint}")
    return run_dir


def fail(command: str, message: str, code: int = 1) -> int:
    print(f"trainstack {command}: {message}", file=sys.stderr)
    return code
