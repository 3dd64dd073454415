"""Bearer tokens, checked against SHA-256 hashes (never the tokens) from a Kubernetes Secret;
each token is a user's, so every action has a name.

The Secret is mounted as a directory. Every key holds one line per token: `<hash>` (64 hex
digits, an optional `sha256:` prefix), the key's name being the user's, or `<hash> <user>`
naming the user explicitly (several lines: one file may map every token to its user). User
names are Kubernetes label values (they label the runs: `trainstack.io/owner`). Rotating is
adding the new token's line, moving clients, then deleting the old one. Admins (who may
cancel anyone's runs) are named by `trainstack serve --admin NAME`. The directory is re-read
at most every `reload_s`, which picks up the kubelet's refresh of a mounted Secret. A
presented token is hashed and compared with every stored hash in constant time; nothing of it
is logged or echoed. A re-read that fails (a key that is not a hash, an unreadable directory)
revokes every token until the Secret is fixed, and says so in the log: keeping the old set
would keep a token the operator meant to remove.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.references import LABEL_VALUE

HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
MIN_TOKEN_CHARS = 32
"""`--hash-token` refuses shorter tokens (e.g. `openssl rand -hex 32` gives 64)."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """Who a request comes from (the token's user)."""

    name: str
    admin: bool = False


class TokenConfigError(ValueError):
    """The Secret holds something that is not a SHA-256 hash (one line, names the key)."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def read_hashes(directory: Path) -> tuple[tuple[str, str], ...]:
    """(hash, user) pairs under `directory` (hidden entries, such as the kubelet's ..data,
    skipped)."""
    entries = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        for line in path.read_text().splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            digest, _, user = line.strip().partition(" ")
            digest = digest.lower().removeprefix("sha256:")
            user = user.strip() or path.name
            if not HEX64.match(digest):
                raise TokenConfigError(
                    f"token hash {path.name!r} in {directory}: not a SHA-256 hex digest (64 hex "
                    "digits); store `trainstack serve --hash-token` output, never the token "
                    "itself"
                )
            if not LABEL_VALUE.match(user):
                raise TokenConfigError(
                    f"token hash {path.name!r} in {directory}: user {user[:63]!r} is not a "
                    "label value (letters, digits, . _ -; at most 63); write `<hash> <user>`"
                )
            entries.append((digest, user))
    return tuple(entries)


class TokenHashes:
    def __init__(
        self,
        directory: Path | None = None,
        hashes: tuple[tuple[str, str], ...] = (),
        reload_s=10.0,
        admins: tuple[str, ...] = (),
    ):
        self.directory = directory
        self.reload_s = reload_s
        self.admins = frozenset(admins)
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

    def current(self) -> tuple[tuple[str, str], ...]:
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

    def identify(self, token: str | None) -> Identity | None:
        """The token's user, or None for no or a wrong token."""
        return self.identify_hash(token_hash(token) if token else None)

    def identify_hash(self, digest: str | None) -> Identity | None:
        """The user whose token has this SHA-256 (a dashboard session's), while it is in the
        Secret; None otherwise."""
        if not digest:
            return None
        presented = digest.encode()
        found = None
        for stored, user in self.current():  # every hash, so timing says nothing about which
            if hmac.compare_digest(presented, stored.encode()):
                found = user
        return None if found is None else Identity(found, admin=found in self.admins)

    def check(self, token: str | None) -> bool:
        return self.identify(token) is not None

    @property
    def empty(self) -> bool:
        return not self.current()
