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


def _group_names() -> frozenset[str]:
    from hydra.core.config_store import ConfigStore

    stored = {name for name, node in ConfigStore.instance().repo.items() if isinstance(node, dict)}
    return frozenset({p.name for p in CONF_DIR.iterdir() if p.is_dir()} | stored | {"hydra"})


def compose_points(points: Sequence[Sequence[str]]) -> Iterator[DictConfig]:
    """`compose(point)` for every point of a sweep, without recomposing what they share.

    Points with the same config-group choices (model=..., compute=...) share one Hydra
    composition; each point's key=value overrides are then applied to a copy with Hydra's own
    override logic, exactly as `compose` applies them after the defaults list. Call inside
    `composer()`.
    """
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    groups = _group_names()
    bases: dict[tuple[str, ...], DictConfig] = {}
    for point in points:
        parsed = parser.parse_overrides(list(point))
        is_group = [o.key_or_group.split("/")[0] in groups for o in parsed]
        choices = tuple(o.input_line for o, g in zip(parsed, is_group, strict=True) if g)
        if choices not in bases:
            bases[choices] = compose(choices)
        cfg = copy.deepcopy(bases[choices])
        values = [o for o, g in zip(parsed, is_group, strict=True) if not g]
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        yield cfg
