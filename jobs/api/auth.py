"""Bearer tokens, checked against SHA-256 hashes (never the tokens) from a Kubernetes Secret.

The Secret is mounted as a directory: every key is one token's hash, 64 hex digits (an
optional `sha256:` prefix is allowed), so rotating is adding the new token's hash, moving
clients, then deleting the old key. The directory is re-read at most every `reload_s`, which
picks up the kubelet's refresh of a mounted Secret. A presented token is hashed and compared
with every stored hash in constant time; nothing of it is logged or echoed. A re-read that
fails (a key that is not a hash, an unreadable directory) revokes every token until the
Secret is fixed, and says so in the log: keeping the old set would keep a token the operator
meant to remove.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from pathlib import Path

HEX64 = re.compile(r"^[0-9a-f]{64}$")
MIN_TOKEN_CHARS = 32
"""`--hash-token` refuses shorter tokens (e.g. `openssl rand -hex 32` gives 64)."""
log = logging.getLogger(__name__)


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
            with self._lock:
                try:
                    self._reload()
                except (OSError, TokenConfigError) as err:
                    # Fail closed (the kubelet swaps a mounted Secret atomically, so this is
                    # not a half-written update): nobody is let in until it is fixed.
                    if self._hashes:
                        log.error("token hashes unreadable; every token refused: %s", err)
                    self._hashes, self._loaded_at = (), time.monotonic()
        return self._hashes

    def match(self, token: str | None) -> str | None:
        """The stored hash the token matches, or None."""
        if not token:
            return None
        presented = token_hash(token).encode()
        matched = None
        for stored in self.current():  # every hash, so timing says nothing about which
            if hmac.compare_digest(presented, stored.encode()):
                matched = stored
        return matched

    def check(self, token: str | None) -> bool:
        return self.match(token) is not None

    def holds(self, hash_: str | None) -> bool:
        """Whether a hash (a session's token) is still in the Secret."""
        return bool(hash_) and any(hmac.compare_digest(hash_, h) for h in self.current())

    @property
    def empty(self) -> bool:
        return not self.current()
