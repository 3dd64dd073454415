"""Bearer tokens, checked against SHA-256 hashes (never the tokens) from a Kubernetes Secret.

The Secret is mounted as a directory: every key is one token's hash, 64 hex digits (an
optional `sha256:` prefix is allowed), so rotating is adding the new token's hash, moving
clients, then deleting the old key. The directory is re-read at most every `reload_s`, which
picks up the kubelet's refresh of a mounted Secret. A presented token is hashed and compared
with every stored hash in constant time; nothing of it is logged or echoed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import re
import threading
import time
from pathlib import Path

HEX64 = re.compile(r"^[0-9a-f]{64}$")


class TokenConfigError(ValueError):
    """The Secret holds something that is not a SHA-256 hash (one line, names the key)."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def read_hashes(directory: Path) -> tuple[str, ...]:
    """The hashes under `directory` (hidden entries, such as the kubelet's ..data, skipped)."""
    hashes = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        value = path.read_text().strip().lower().removeprefix("sha256:")
        if not HEX64.match(value):
            raise TokenConfigError(
                f"token hash {path.name!r} in {directory}: not a SHA-256 hex digest (64 hex "
                "digits); store `trainstack serve --hash-token` output, never the token itself"
            )
        hashes.append(value)
    return tuple(hashes)


class TokenHashes:
    def __init__(self, directory: Path | None = None, hashes: tuple[str, ...] = (), reload_s=10.0):
        self.directory = directory
        self.reload_s = reload_s
        self._hashes = hashes
        self._loaded_at = -float("inf")
        self._lock = threading.Lock()
        if directory is not None:
            if not directory.is_dir():
                raise TokenConfigError(f"token hashes: {directory} is not a directory")
            self._reload()

    def _reload(self) -> None:
        self._hashes = read_hashes(self.directory)
        self._loaded_at = time.monotonic()

    def current(self) -> tuple[str, ...]:
        if self.directory is not None and time.monotonic() - self._loaded_at > self.reload_s:
            # A Secret mid-update (unreadable or half-written): keep the last good set.
            with self._lock, contextlib.suppress(OSError, TokenConfigError):
                self._reload()
        return self._hashes

    def check(self, token: str | None) -> bool:
        if not token:
            return False
        presented = token_hash(token).encode()
        matched = False
        for stored in self.current():  # every hash, so timing says nothing about which
            matched |= hmac.compare_digest(presented, stored.encode())
        return matched

    @property
    def empty(self) -> bool:
        return not self.current()
