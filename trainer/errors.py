"""The trainer's user-facing error: one line naming the key and what is allowed."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad configuration or data. `python -m trainer` prints it alone and exits 2."""
