"""trainstack changes only what it made: every create-over, replace, patch or delete of a
ConfigMap or job first checks the object's `app.kubernetes.io/managed-by` label. A same-named
object without it (another team's ConfigMap, a PyTorchJob someone applied by hand) is refused
with one line (409 in the Training API, exit 2 on the CLI) and left exactly as it was."""

from __future__ import annotations

from jobs.errors import BackendError
from jobs.spec import OWNER_LABEL

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "trainstack"


class NotOurs(BackendError):
    """An object of that name exists and trainstack did not make it."""


def labels_of(obj) -> dict:
    """Labels of a plain dict or of a kubernetes client model."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return (obj.get("metadata") or {}).get("labels") or {}
    return (obj.metadata.labels if obj.metadata else None) or {}


def ensure_ours(kind: str, namespace: str, name: str, obj) -> None:
    """Raise NotOurs unless `obj` (None: absent) carries trainstack's managed-by label."""
    if obj is not None and labels_of(obj).get(MANAGED_BY) != MANAGER:
        raise NotOurs(
            f"{kind} {namespace}/{name} exists and is not managed by trainstack "
            f"(no {MANAGED_BY}={MANAGER} label); left as it is: pick another run_id"
        )


def ensure_owned_by(action: str, name: str, obj, user: str | None) -> None:
    """Raise NotOurs when the run `obj` (None: absent) carries another user's owner label.

    A courtesy on the CLI, not a boundary: whoever holds the kubeconfig can change any
    object RBAC lets them; `--force` (`backend.others_runs=true`) acts anyway."""

    if obj is None:
        return
    owner = labels_of(obj).get(OWNER_LABEL)
    if owner != user:
        raise NotOurs(
            f"{action} {name}: run belongs to {owner or 'nobody recorded'} ({OWNER_LABEL}), "
            f"you are {user or 'nobody'} ($TRAINSTACK_USER, else $USER); only its owner may "
            "change it: pass --force to act anyway"
        )
