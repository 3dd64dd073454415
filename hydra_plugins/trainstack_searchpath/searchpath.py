"""Adds the user's config directories (jobs/config_path.py) and then the shipped tree
`pkg://jobs.conf` to Hydra's config search path. Hydra searches in order and the first match
wins, so a user's file overrides a shipped one of the same name."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class TrainstackSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from jobs.config_path import SHIPPED_CONF_MODULE, user_config_dirs

        for directory in user_config_dirs():
            if directory.is_dir():
                search_path.append("trainstack-user", f"file://{directory.resolve()}")
        search_path.append("trainstack", f"pkg://{SHIPPED_CONF_MODULE}")
