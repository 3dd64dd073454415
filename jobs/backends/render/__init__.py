"""The render backend's home: its traits, options and their checks (here: light, read without
importing the rest) and the backend (`backend`), which writes kubectl-applyable YAML instead of
submitting."""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.backend_registry.traits import BackendOptions, BackendTraits
from jobs.backends.kubernetes import CLUSTER, CLUSTER_CHECKS, JOB_CHECKS
from jobs.errors import JobConfigError


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


@dataclass
class RenderOptions(BackendOptions):
    """backend=render writes under `output_root`, one of the keys every backend has."""

    name: str = "render"

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Refuse an output_root that cannot be written before the first file (a half-rendered
        sweep) instead of a traceback."""
        root = Path(cfg.backend.output_root)
        reason = unwritable_reason(root)
        if reason:
            raise JobConfigError(
                "backend.output_root",
                f"{str(root)!r} cannot be written ({reason}); allowed: a directory this user "
                "can create or write",
            )


TRAITS = BackendTraits(
    name="render",
    describe="write kubectl-applyable YAML to <backend.output_root>/<run_id>/manifests.yaml",
    options=RenderOptions,
    pods=True,
    submits=False,
    job_checks=JOB_CHECKS,
    cluster_checks=CLUSTER_CHECKS,
    cluster=CLUSTER,
)
