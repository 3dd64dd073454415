"""Where runs live: a run's directory under `storage.root`, whether a path is on the stack's
FSx mount, and where local state is kept when the run dir is remote. Below `spec`,
`resume_from`, the checks and the backends, which all read it."""

from __future__ import annotations

from typing import Any

LOCAL_STATE_ROOT = "runs"
"""Where the local backend keeps a run's state when the run dir itself is remote
(storage.root=s3://...)."""


def run_dir_for(storage_root: str, run_id: str) -> str:
    return f"{storage_root.rstrip('/')}/{run_id}"


def on_fsx(cfg: Any, path: str) -> bool:
    mount = cfg.storage.fsx_mount.rstrip("/")
    return bool(cfg.storage.fsx) and (path == mount or path.startswith(f"{mount}/"))
