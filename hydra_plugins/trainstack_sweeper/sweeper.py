"""The grid sweep of Hydra's basic sweeper (`a,b`, `range()`, `choice()`, `glob()`; the
cartesian product in command-line order), through Hydra's public Sweeper interface.

Unlike the basic sweeper it does not compose every point once more before launching
(`validate_batch_is_legal`): the launchers trainstack pairs it with compose each point and
validate all of them before the first is written or run (jobs/sweep.py), so composing twice
would only double the cost of a large sweep. Like the basic sweeper it saves the sweep's
config as `multirun.yaml` in the sweep dir and re-raises a failed point's error at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from jobs.sweep import expand


class TrainstackSweeper(Sweeper):
    def __init__(self, params: dict[str, str] | None = None):
        self.params = dict(params or {})
        self.config = self.launcher = self.hydra_context = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Sequence[JobReturn]:
        axes = [f"{key}={value}" for key, value in self.params.items()]
        points = expand([*axes, *arguments], config_loader=self.hydra_context.config_loader)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns = self.launcher.launch(points, initial_job_idx=0)
        for ret in returns:
            _ = ret.return_value  # a failed point's error, as the basic sweeper raises it
        return returns
