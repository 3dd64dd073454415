"""What the trainer tells its user: the one-line error for bad input, and warnings."""

from __future__ import annotations

import sys


class ConfigError(Exception):
    """Bad configuration or data. `python -m trainer` prints it alone and exits 2."""


def warn(message: str) -> None:
    print(f"[trainer] warning: {message}", file=sys.stderr, flush=True)
