"""`hydra/launcher=backend_local` and `backend_render`, registered in Hydra's ConfigStore on
import. conf/config.yaml picks `backend_${backend}`, so the backend chooses its launcher.

No `from __future__ import annotations`: Hydra's plugin scan executes this module outside
`sys.modules`, where dataclasses cannot resolve string annotations.
"""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from jobs.backend_registry import NAMES, traits_of


@dataclass
class TrainstackLauncherConf:
    _target_: str = "hydra_plugins.trainstack_launcher.launcher.TrainstackLauncher"
    # Processes preparing (composing and validating) a batch's points: 0 = one per CPU (at
    # most 8) from 32 points on Linux, else this process; n = n (jobs/sweep_workers.py).
    workers: int = 0


for backend in (n for n in NAMES if traits_of(n).launcher == "trainstack"):
    ConfigStore.instance().store(
        group="hydra/launcher",
        name=f"backend_{backend}",
        node=TrainstackLauncherConf,
        provider="trainstack",
    )
