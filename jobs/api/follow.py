"""Log follow fan-out: however many clients follow a rank's log, the API server sees one stream.

One upstream per (run, rank) runs in a thread (the backend's follow: the pod's log plus the
job's watch) and hands each line to every follower's asyncio queue; a follower who joins late
first gets the last BACKLOG_LINES lines. When the last follower of an upstream leaves, its
`Cancellation` shuts the upstream's streams down at once, so nothing of a follower outlives it
by more than a moment. Each caller (a token's user) may hold `max_per_caller` follows at a
time: past that it is a 429, not one more set of threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from jobs.backends.kubernetes.backend import Cancellation, FollowCancelled

BACKLOG_LINES = 10_000
"""Lines kept per upstream for followers who join after it started."""
MAX_FOLLOWS_PER_CALLER = 8
END = object()
"""Queued after an upstream's last line."""

OpenStream = Callable[[str, int, Cancellation], Iterator[str]]


class TooManyFollowers(Exception):
    pass


@dataclass(eq=False)
class Follower:
    """One client's place in an upstream: lines (then END, or the upstream's error) arrive on
    `queue`; `close()` when the client is gone."""

    hub: LogHub
    upstream: _Upstream
    caller: str
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    closed: bool = False

    def put(self, item) -> None:
        # A closed loop (the server shutting down) has nobody left to tell.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def close(self) -> None:
        self.hub._leave(self)


@dataclass(eq=False)
class _Upstream:
    key: tuple[str, int]
    cancel: Cancellation = field(default_factory=Cancellation)
    backlog: deque = field(default_factory=lambda: deque(maxlen=BACKLOG_LINES))
    followers: set[Follower] = field(default_factory=set)
    ended: bool = False


class LogHub:
    def __init__(self, open_stream: OpenStream, max_per_caller: int = MAX_FOLLOWS_PER_CALLER):
        self.open_stream = open_stream
        self.max_per_caller = max_per_caller
        self._lock = threading.Lock()
        self._upstreams: dict[tuple[str, int], _Upstream] = {}
        self._per_caller: dict[str, int] = {}
        self.upstreams_started = 0
        """Upstreams started so far (tests read it)."""

    def join(self, run_id: str, rank: int, caller: str) -> Follower:
        """Follow (run, rank) from the running event loop; raises TooManyFollowers."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._per_caller.get(caller, 0)
            if held >= self.max_per_caller:
                raise TooManyFollowers(
                    f"{held} log follows open for this token (at most {self.max_per_caller}); "
                    "close one first"
                )
            self._per_caller[caller] = held + 1
            upstream = self._upstreams.get((run_id, rank))
            start = upstream is None
            if start:
                upstream = self._upstreams[(run_id, rank)] = _Upstream((run_id, rank))
                self.upstreams_started += 1
            follower = Follower(self, upstream, caller, loop)
            for line in upstream.backlog:
                follower.queue.put_nowait(line)
            upstream.followers.add(follower)
        if start:
            threading.Thread(target=self._pump, args=(upstream,), daemon=True).start()
        return follower

    @property
    def active(self) -> int:
        """Upstreams open now."""
        with self._lock:
            return len(self._upstreams)

    @property
    def held(self) -> int:
        """Follows open now, all callers together."""
        with self._lock:
            return sum(self._per_caller.values())

    def _leave(self, follower: Follower) -> None:
        with self._lock:
            if follower.closed:
                return
            follower.closed = True
            self._per_caller[follower.caller] -= 1
            if not self._per_caller[follower.caller]:
                del self._per_caller[follower.caller]
            upstream = follower.upstream
            upstream.followers.discard(follower)
            idle = not upstream.followers and not upstream.ended
            if idle and self._upstreams.get(upstream.key) is upstream:
                del self._upstreams[upstream.key]
        if idle:
            upstream.cancel.set()  # nobody reads it any more: close its streams now

    def _pump(self, upstream: _Upstream) -> None:
        run_id, rank = upstream.key
        last = END
        try:
            for line in self.open_stream(run_id, rank, upstream.cancel):
                with self._lock:
                    upstream.backlog.append(line)
                    followers = list(upstream.followers)
                for follower in followers:
                    follower.put(line)
        except FollowCancelled:
            pass
        except Exception as exc:  # handed to the followers: the first one turns it into a status
            last = exc
        with self._lock:
            upstream.ended = True
            if self._upstreams.get(upstream.key) is upstream:
                del self._upstreams[upstream.key]
            followers = list(upstream.followers)
        for follower in followers:
            follower.put(last)
