"""Adds the user's config directories (jobs/config_path.py) and then the shipped tree
`pkg://conf` to Hydra's config search path. Hydra searches in order and the first match wins, so
a user's file overrides a shipped one of the same name.

It also drops the entry Hydra adds for the app's own package (`pkg://jobs`: `hydra.main` with
`config_path=None` searches the calling module's package). That package holds no config, only
code folders, which Hydra would list as config groups (`api`, `backends`, ...) in `--help` and
tab completion."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from jobs.config_path import SHIPPED_CONF_MODULE, user_config_dirs

APP_PACKAGE = "pkg://jobs"


class TrainstackSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        path = search_path.get_path()
        path[:] = [e for e in path if not (e.provider == "main" and e.path == APP_PACKAGE)]
        for directory in user_config_dirs():
            if directory.is_dir():
                search_path.append("trainstack-user", f"file://{directory.resolve()}")
        search_path.append("trainstack", f"pkg://{SHIPPED_CONF_MODULE}")
