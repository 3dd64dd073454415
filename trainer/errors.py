"""What the trainer tells its user: the one-line error for bad input, and warnings."""

from __future__ import annotations

import sys

# The contract's class itself (not a subclass): the config checks the launcher runs raise it,
# and every `except ConfigError` in the trainer catches them.
from contract.errors import ConfigError

__all__ = ["ConfigError", "warn"]


def warn(message: str) -> None:
    print(f"[trainer] warning: {message}", file=sys.stderr, flush=True)
