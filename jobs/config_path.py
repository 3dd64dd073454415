"""Where trainstack's Hydra configs come from: the user's config directories, then the tree that
ships with trainstack (the top-level `conf` package: package data in the wheel). No Hydra
import: the search-path plugin, `infra.stack_defaults` and the CLI all read it.

`TRAINSTACK_CONFIG_PATH` lists the user's directories (os.pathsep-separated, first wins), each
holding its own `experiment/`, `model/`, `compute/`, `stack/`, ... files. Unset, it is the one
directory `$XDG_CONFIG_HOME/trainstack` (`~/.config/trainstack`), where
`python -m infra.stack_defaults` writes `stack/<name>.yaml`. These directories come before the
shipped tree, so a file there with a shipped file's name replaces it and a new name adds an
option. (`--config-dir` and `hydra.searchpath` add directories after both, as in any Hydra app.)
"""

from __future__ import annotations

import os
from pathlib import Path

import conf

CONFIG_PATH_ENV = "TRAINSTACK_CONFIG_PATH"
SHIPPED_CONF_MODULE = conf.__name__
SHIPPED_CONF_DIR = Path(conf.__file__).resolve().parent


def default_user_config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainstack"


def user_config_dirs() -> list[Path]:
    """The user's config directories, highest priority first."""
    listed = os.environ.get(CONFIG_PATH_ENV)
    if listed is None:
        return [default_user_config_dir()]
    return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]


def user_config_dir() -> Path:
    """Where generated configs (stack files) go: the first user config directory."""
    dirs = user_config_dirs()
    return dirs[0] if dirs else default_user_config_dir()
