"""The `hydra/launcher=pytorchjob` config, registered in Hydra's ConfigStore on import.

No `from __future__ import annotations`: Hydra's plugin scan executes this module outside
`sys.modules`, where dataclasses cannot resolve string annotations.
"""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

MODES = ("submit", "wait")


@dataclass
class PyTorchJobLauncherConf:
    _target_: str = "hydra_plugins.pytorchjob_launcher.launcher.PyTorchJobLauncher"
    mode: str = "submit"
    """submit: return once every point is accepted (each JobReturn carries its run id);
    wait: follow all points concurrently and map each final state onto the JobReturn status."""
    max_parallel: int = 16
    """Points followed at the same time in wait mode (one watch stream each)."""
    skip_submitted: bool = True
    """Re-running a sweep (same `sweep_id`) skips points whose run already exists and has not
    failed or been cancelled; those are submitted again and resume from their checkpoint."""


ConfigStore.instance().store(
    group="hydra/launcher",
    name="pytorchjob",
    node=PyTorchJobLauncherConf,
    provider="trainstack",
)
