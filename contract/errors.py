"""The one error a bad config raises, on either side: the trainer's checks and the launcher's
plan both raise it, and `python -m trainer` prints it alone and exits 2."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad configuration or data. `python -m trainer` prints it alone and exits 2."""
