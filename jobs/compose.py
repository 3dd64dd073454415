"""Compose a job config from `conf/` with Hydra's compose API (no output dirs, no chdir)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
CONFIG_NAME = "config"
HYDRA_VERSION_BASE = "1.3"


@contextmanager
def composer() -> Iterator[object]:
    """Initialize Hydra once for many `compose` calls (sweeps, benchmarks)."""
    from hydra import initialize_config_dir

    from jobs.schema import register

    register()
    with initialize_config_dir(
        config_dir=str(CONF_DIR), version_base=HYDRA_VERSION_BASE, job_name="trainstack"
    ):
        yield


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The composed job config for `overrides` (Hydra's errors name a bad key or option)."""
    from hydra import compose as hydra_compose
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose(CONFIG_NAME, overrides=list(overrides))
    with composer():
        return hydra_compose(CONFIG_NAME, overrides=list(overrides))
