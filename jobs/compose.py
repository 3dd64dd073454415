"""Compose a job config with Hydra's compose API (no output dirs, no chdir).

The configs come from Hydra's search path as trainstack's search-path plugin sets it up
(jobs/config_path.py: the user's config directories, then the shipped `conf`), the same
path the `trainstack launch` app (jobs/app.py) composes from.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hydra import compose as hydra_compose
from hydra import initialize
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from jobs.config_path import SHIPPED_CONF_DIR
from jobs.schema import register

CONF_DIR = SHIPPED_CONF_DIR
"""The shipped config tree (package data)."""
CONFIG_NAME = "config"
HYDRA_VERSION_BASE = "1.3"


@contextmanager
def composer() -> Iterator[object]:
    """Initialize Hydra once for many `compose` calls (benchmarks, services)."""
    register()
    # config_path=None: no directory of this module's; the search-path plugin adds the user's
    # directories and the shipped tree.
    with initialize(config_path=None, version_base=HYDRA_VERSION_BASE, job_name="trainstack"):
        yield


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The composed job config for `overrides` (Hydra's errors name a bad key or option)."""
    if GlobalHydra.instance().is_initialized():
        return hydra_compose(CONFIG_NAME, overrides=list(overrides))
    with composer():
        return hydra_compose(CONFIG_NAME, overrides=list(overrides))
