"""The `hydra/launcher=kubernetes` config, registered in Hydra's ConfigStore on import.

No `from __future__ import annotations`: Hydra's plugin scan executes this module outside
`sys.modules`, where dataclasses cannot resolve string annotations.
"""

from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore

MODES = ("submit", "wait")


@dataclass
class KubernetesLauncherConf:
    _target_: str = "hydra_plugins.kubernetes_launcher.launcher.KubernetesLauncher"
    mode: Optional[str] = None  # noqa: UP045 (OmegaConf 2.3 reads typing.Optional only)
    """submit: return once every point is accepted (each JobReturn carries its run id);
    wait: follow all points concurrently and map each final state onto the JobReturn status;
    null: wait when `backend.wait` (`--wait`), else submit."""
    max_parallel: int = 16
    """Points followed at the same time in wait mode (one watch stream each)."""
    skip_submitted: bool = True
    """Re-running a sweep (same `sweep_id`) skips points whose run already exists and has not
    failed or been cancelled; those are submitted again and resume from their checkpoint."""
    workers: int = 0
    """Processes preparing (composing and validating) a batch's points: 0 = one per CPU (at
    most 8) from 32 points on Linux, else this process (jobs/sweep_workers.py)."""


# `backend_kubernetes` is what conf/config.yaml picks for backend=kubernetes; the job kind is
# `job.api` (TrainJob or PyTorchJob), so `trainjob` and `pytorchjob` (the README's names before
# this one) are the same launcher.
for name in ("kubernetes", "trainjob", "pytorchjob", "backend_kubernetes"):
    ConfigStore.instance().store(
        group="hydra/launcher", name=name, node=KubernetesLauncherConf, provider="trainstack"
    )
