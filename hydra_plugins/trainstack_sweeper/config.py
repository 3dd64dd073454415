"""`hydra/sweeper=trainstack`, registered in Hydra's ConfigStore on import.

No `from __future__ import annotations`: Hydra's plugin scan executes this module outside
`sys.modules`, where dataclasses cannot resolve string annotations.
"""

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore


@dataclass
class TrainstackSweeperConf:
    _target_: str = "hydra_plugins.trainstack_sweeper.sweeper.TrainstackSweeper"
    params: dict[str, str] = field(default_factory=dict)
    """Sweep axes kept in config (`key: a,b`), as the basic sweeper's `hydra.sweeper.params`;
    the command line's come after them."""


ConfigStore.instance().store(
    group="hydra/sweeper", name="trainstack", node=TrainstackSweeperConf, provider="trainstack"
)
