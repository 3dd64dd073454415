"""A real S3 endpoint for tests: moto's HTTP server on 127.0.0.1, plus a fault-injecting proxy.

`MotoS3` runs moto's server in a thread. `FaultProxy` is a small HTTP proxy between boto3 and
moto that answers chosen requests with 503 SlowDown / 500 InternalError instead of forwarding
them, so botocore's real retry path runs. It reads botocore's `amz-sdk-request: attempt=N`
header, which lets a rule fail only first attempts (transient) or every attempt (persistent),
and it counts what it saw (`transfers`: body bytes per request and the rank that sent it, from
the trainer's User-Agent). Rules are plain callables; see `fail_every_nth` and
`fail_matching`; a rule's `ACK_NOT_STORED` answers a write as stored and drops it, and a `Slow`
holds the request back (it reaches moto late) or its answer (stored on time, answered late);
`outage` fails every request for a while, starting at a chosen one. An optional
`Link` delays each response like a connection with first-byte latency and limited bandwidth
(benchmarks use it; loopback alone has neither). Processes started by a test (torchrun) reach
either through `s3_env(url)`.
"""

from __future__ import annotations

import hashlib
import http.client
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit
from xml.sax.saxutils import escape

DUMMY_ACCESS_KEY = "AKIATESTDUMMYKEY0000"
DUMMY_SECRET_KEY = "dummy-secret-never-in-messages"  # a test value, never a real secret
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}
_FAULT_BODIES = {
    503: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
}


def s3_env(endpoint_url: str) -> dict[str, str]:
    """Environment that points boto3 (in this or a child process) at `endpoint_url` with
    dummy credentials and no shared config files or instance metadata lookups."""
    return {
        "AWS_ENDPOINT_URL_S3": endpoint_url,
        "AWS_ACCESS_KEY_ID": DUMMY_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


class MotoS3:
    """moto's S3 server on 127.0.0.1 and a free port; `url` once started."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.url = ""

    def start(self) -> MotoS3:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.stop()

    def client(self):
        """A boto3 client straight to moto (no proxy, no faults) for setup and inspection."""
        import boto3

        env = s3_env(self.url)
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )


@dataclass(frozen=True)
class Link:
    """One HTTP connection's cost: a fixed latency per request plus bytes over bandwidth."""

    latency_s: float
    mib_per_s: float

    def delay(self, nbytes: int) -> float:
        return self.latency_s + nbytes / (self.mib_per_s * 1024 * 1024)


@dataclass(frozen=True)
class SeenRequest:
    """One request as the proxy saw it; `fault` is the status injected, or None."""

    method: str
    path: str
    attempt: int
    first_attempt_index: int
    """How many first attempts came before this request's first attempt (0-based)."""
    fault: int | Slow | None = None
    at: float = 0.0
    """time.monotonic() when the proxy received it."""


@dataclass(frozen=True)
class Slow:
    """A fault that is no status: the request is answered `seconds` late. `hold`: held
    before it is forwarded (it reaches S3 late, like a congested path); else forwarded at
    once and only the answer is late (stored on time, the client waits)."""

    seconds: float
    hold: bool = False


CUT_STREAM = -1
"""A fault that is no status: forward the request, then hang up halfway through the body."""
ACK_NOT_STORED = -2
"""A fault that is no status: answer a write (a PUT, or the POST completing a multipart
upload) as S3 answers one it stored, and drop it: acknowledged, never stored."""
Fault = int | Slow
Rule = Callable[[SeenRequest], Fault | None]
"""Given a request (fault unset), the HTTP status to inject (503 or 500), `CUT_STREAM`,
`ACK_NOT_STORED`, a `Slow`, or None to forward it untouched."""


def fail_every_nth(n: int, status: int = 503, methods: tuple[str, ...] = ()) -> Rule:
    """Transient faults: the first attempt of every n-th request fails; its retry passes."""

    def rule(req: SeenRequest) -> int | None:
        hit = req.attempt == 1 and req.first_attempt_index % n == n - 1
        return status if hit and (not methods or req.method in methods) else None

    return rule


def fail_matching(
    pattern: str,
    status: Fault = 503,
    methods: tuple[str, ...] = ("PUT", "POST"),
    after: int = 0,
    times: int | None = None,
    first_attempt_only: bool = False,
) -> Rule:
    """Faults for requests whose path (with query) matches `pattern`: every attempt (a
    persistent outage) unless `first_attempt_only` or `times` (at most that many faults).
    The first `after` matching requests pass, so an outage can start midway through a
    directory upload."""
    regex = re.compile(pattern)
    seen = faults = 0
    lock = threading.Lock()

    def rule(req: SeenRequest) -> Fault | None:
        nonlocal seen, faults
        if req.method not in methods or not regex.search(req.path):
            return None
        if first_attempt_only and req.attempt > 1:
            return None
        with lock:
            seen += 1
            if seen <= after or (times is not None and faults >= times):
                return None
            faults += 1
        return status

    return rule


def outage(starts_at: str, faults: int, status: int = 503) -> Rule:
    """S3 down for a while: from the first request whose path matches `starts_at`, every
    request of any method fails with `status`. Those matching `starts_at` fail for good; the
    others `faults` times in all, then pass again. `ended_at()` (time.monotonic()) is when
    the last of those failed: S3 is back for them from then on."""
    regex = re.compile(starts_at)
    left = faults
    started = False
    ended: list[float] = []
    lock = threading.Lock()

    def rule(req: SeenRequest) -> Fault | None:
        nonlocal left, started
        with lock:
            if regex.search(req.path):
                started = True
                return status
            if not started or left == 0:
                return None
            left -= 1
            if left == 0:
                ended.append(req.at)
        return status

    rule.ended_at = lambda: ended[0] if ended else None  # type: ignore[attr-defined]
    return rule


def first_of(*rules: Rule) -> Rule:
    """The first fault any of `rules` chooses (each later rule sees only requests the
    earlier ones let through)."""

    def rule(req: SeenRequest) -> Fault | None:
        for one in rules:
            fault = one(req)
            if fault is not None:
                return fault
        return None

    return rule


@dataclass(frozen=True)
class Transfer:
    """One forwarded request: who sent it (the trainer's rank from its User-Agent, None when
    it carries none) and the bytes of the request and response bodies."""

    method: str
    path: str
    rank: int | None
    sent: int
    received: int


@dataclass
class _ProxyState:
    upstream: str
    rule: Rule | None = None
    link: Link | None = None
    seen: list[SeenRequest] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)
    first_attempts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class FaultProxy:
    """An HTTP proxy to `upstream` (moto) that injects faults chosen by `rule`."""

    def __init__(self, upstream: str, rule: Rule | None = None, link: Link | None = None) -> None:
        self.state = _ProxyState(upstream=upstream, rule=rule, link=link)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self.state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def set_rule(self, rule: Rule | None) -> None:
        with self.state.lock:
            self.state.rule = rule

    @property
    def seen(self) -> list[SeenRequest]:
        with self.state.lock:
            return list(self.state.seen)

    @property
    def transfers(self) -> list[Transfer]:
        with self.state.lock:
            return list(self.state.transfers)

    def bytes_received_by_rank(self, path_pattern: str = "") -> dict[int | None, int]:
        """Response body bytes of GETs whose path matches `path_pattern`, per rank."""
        regex = re.compile(path_pattern)
        totals: dict[int | None, int] = {}
        for t in self.transfers:
            if t.method == "GET" and regex.search(t.path):
                totals[t.rank] = totals.get(t.rank, 0) + t.received
        return totals

    @property
    def faults(self) -> int:
        """Requests failed (a status, a cut stream, a write dropped); `slowed` counts the
        late ones."""
        return sum(1 for r in self.seen if r.fault is not None and not isinstance(r.fault, Slow))

    @property
    def slowed(self) -> int:
        return sum(1 for r in self.seen if isinstance(r.fault, Slow))

    @property
    def retries(self) -> int:
        return sum(1 for r in self.seen if r.attempt > 1)


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers end with an empty line
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def _attempt(header: str | None) -> int:
    match = re.search(r"attempt=(\d+)", header or "")
    return int(match.group(1)) if match else 1


def _rank(user_agent: str | None) -> int | None:
    match = re.search(r"trainstack-rank/(\d+)", user_agent or "")
    return int(match.group(1)) if match else None


def _handler_for(state: _ProxyState) -> type[BaseHTTPRequestHandler]:
    upstream = urlsplit(state.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet test output
            pass

        def _proxy(self) -> None:
            body = _read_body(self)
            attempt = _attempt(self.headers.get("amz-sdk-request"))
            now = time.monotonic()
            with state.lock:
                index = state.first_attempts
                if attempt == 1:
                    state.first_attempts += 1
                request = SeenRequest(self.command, self.path, attempt, index, at=now)
                fault = state.rule(request) if state.rule else None
                state.seen.append(SeenRequest(self.command, self.path, attempt, index, fault, now))
            if isinstance(fault, Slow):
                if fault.hold:
                    time.sleep(fault.seconds)
                self._forward(body, delay=0.0 if fault.hold else fault.seconds)
            elif fault is None or fault == CUT_STREAM:
                self._forward(body, cut=fault == CUT_STREAM)
            elif fault == ACK_NOT_STORED:
                self._acknowledge(body)
            else:
                self._send_fault(fault)

        def _acknowledge(self, body: bytes) -> None:
            etag = f'"{hashlib.md5(body).hexdigest()}"'
            payload = b""
            if self.command == "POST":  # CompleteMultipartUpload: its result document
                bucket, _, key = unquote(urlsplit(self.path).path).lstrip("/").partition("/")
                payload = (
                    '<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult '
                    'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key>"
                    f"<ETag>{escape(etag)}</ETag></CompleteMultipartUploadResult>"
                ).encode()
            self.send_response(200)
            self.send_header("ETag", etag)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _send_fault(self, status: int) -> None:
            code, message = _FAULT_BODIES.get(status, ("InternalError", "Injected fault"))
            xml = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
            payload = b"" if self.command == "HEAD" else xml.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(xml.encode())))
            self.end_headers()
            self.wfile.write(payload)

        def _forward(self, body: bytes, cut: bool = False, delay: float = 0.0) -> None:
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        conn.putheader(name, value)
                if body or self.command in ("PUT", "POST"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                response = conn.getresponse()
                data = response.read()
                with state.lock:
                    rank = _rank(self.headers.get("User-Agent"))
                    transfer = Transfer(self.command, self.path, rank, len(body), len(data))
                    state.transfers.append(transfer)
                if state.link is not None:
                    delay += state.link.delay(len(body) + len(data))
                if delay:
                    time.sleep(delay)
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if cut:  # the full length was promised: the client sees a short read
                    self.wfile.write(data[: len(data) // 2])
                    self.close_connection = True
                elif self.command != "HEAD":
                    self.wfile.write(data)
            except (OSError, http.client.HTTPException):
                self.close_connection = True  # the client sees a dropped connection and retries
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _proxy

    return Handler
