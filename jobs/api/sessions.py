"""Browser sessions and sign-in limits for the dashboard.

Signing in at `/login` trades a token for a random session id (256 bits) kept in this process:
the cookie carries the id, never the token, expires with the session, and is `Secure` when the
page was served over TLS. A session is only as good as its token: once the token's hash leaves
the Secret, its sessions stop working too. Each API replica keeps its own sessions (a browser
that lands on another replica signs in again). Sign-in attempts are limited per client
address, so the form cannot be used to guess tokens at the speed of the network.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

SESSION_COOKIE = "trainstack_session"
SESSION_TTL_S = 12 * 3600.0
MAX_SESSIONS = 10_000
"""Oldest sessions go first past this (a flood of sign-ins cannot grow memory unbounded)."""
MAX_SESSIONS_PER_TOKEN = 16
"""A token's oldest session goes first past this: one client signing in in a loop evicts
only its own sessions, never everyone's."""
LOGIN_ATTEMPTS = 10
LOGIN_WINDOW_S = 60.0


class Sessions:
    def __init__(
        self,
        ttl_s: float = SESSION_TTL_S,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
        per_token: int = MAX_SESSIONS_PER_TOKEN,
    ):
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.per_token = per_token
        self._of_token: dict[str, deque[str]] = {}
        """token hash -> its session ids, oldest first (at most `per_token`)."""
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, tuple[str, float]] = OrderedDict()
        """session id -> (token hash, expiry), oldest first."""

    def create(self, token_hash: str) -> str:
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[session_id] = (token_hash, self.clock() + self.ttl_s)
            mine = self._of_token.setdefault(token_hash, deque())
            mine.append(session_id)
            while len(mine) > self.per_token:
                self._sessions.pop(mine.popleft(), None)
            while len(self._sessions) > self.max_sessions:
                _, (oldest_token, _) = self._sessions.popitem(last=False)
                self._forget(oldest_token)
        return session_id

    def _forget(self, token_hash: str) -> None:
        """Drop ids of `token_hash` that are no longer sessions (keeps the index bounded)."""
        mine = self._of_token.get(token_hash)
        if mine is None:
            return
        alive = deque(i for i in mine if i in self._sessions)
        if alive:
            self._of_token[token_hash] = alive
        else:
            del self._of_token[token_hash]

    def token_hash(self, session_id: str | None) -> str | None:
        """The hash of the token the session was opened with; None if unknown or expired."""
        if not session_id:
            return None
        with self._lock:
            found = self._sessions.get(session_id)
            if found is None:
                return None
            if found[1] <= self.clock():
                del self._sessions[session_id]
                return None
            return found[0]

    def drop(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)


class LoginLimiter:
    """At most `attempts` sign-ins per client in any `window_s` (a sliding window)."""

    def __init__(
        self,
        attempts: int = LOGIN_ATTEMPTS,
        window_s: float = LOGIN_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 100_000,
    ):
        self.attempts = attempts
        self.window_s = window_s
        self.clock = clock
        self.max_clients = max_clients
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def allow(self, client: str) -> float | None:
        """Record an attempt; None if allowed, else seconds until the next one is."""
        now = self.clock()
        with self._lock:
            times = self._seen.setdefault(client, deque())
            self._seen.move_to_end(client)
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if len(times) >= self.attempts:
                return max(1.0, times[0] + self.window_s - now)
            times.append(now)
            while len(self._seen) > self.max_clients:
                self._seen.popitem(last=False)
            return None
