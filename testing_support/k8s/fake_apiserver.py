"""A Kubernetes REST API test double: a real HTTP server on 127.0.0.1, in a thread.

It speaks just enough of the API for trainstack's cluster code, driven through the official
client: namespaces, nodes, service accounts, config maps, pods (+ logs, incl. follow), the
PyTorchJob custom resource (`kubeflow.org/v1`), Kubeflow Trainer's TrainJob, JobSet and
ClusterTrainingRuntime (`fake_trainer.py`), and the CRD object itself. Objects get uids and
a global resourceVersion; list/get/create/patch/delete behave like the apiserver (409
AlreadyExists, 404 NotFound, ownerReference cascades, PATCH by its Content-Type as in
`fake_patch.py`), and `?watch=true` streams chunked JSON events from a resourceVersion (410 Gone
when it is older than the retained history).

Objects live in `fake_store.ObjectStore`; the training operator is simulated by
`fake_operator.py`. Faults are injected through
`server.faults` (see `Faults`). Test-only: never shipped.
"""

from __future__ import annotations

import contextlib
import copy
import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from testing_support.k8s.fake_patch import PatchError, apply_patch
from testing_support.k8s.fake_store import KINDS, ObjectStore, matches, parse_selector


@dataclass
class Faults:
    """Faults consumed one request at a time (lists are popped from the front)."""

    conflict_on_create: set[str] = field(default_factory=set)
    """Object names whose next create races a concurrent submitter: the object is stored as
    sent (once) and the caller gets 409 AlreadyExists."""
    read_errors: list[int] = field(default_factory=list)
    """HTTP statuses (e.g. 500, 503) returned by the next GET requests, in order."""
    read_stalls: int = 0
    """The next N GET requests stall `stall_seconds` before answering (client timeouts)."""
    stall_seconds: float = 3.0
    drop_watch_after: list[int] = field(default_factory=list)
    """The next watch streams are cut mid-chunk after this many events each."""
    reject_create: dict[str, int] = field(default_factory=dict)
    """Object name -> HTTP status (e.g. 403, 422) its creates are refused with."""
    gone_on_watch: int = 0
    """The next N watches answer 410 Gone (an expired resourceVersion)."""
    outage: object = None
    """A callable: while it returns True every request is answered 503 (an API outage)."""
    silent_log_streams: int = 0
    """The next N log follows answer 200 and then send nothing, never ending (a connection
    dropped without a FIN: NAT timeout, a dead node's kubelet)."""
    open_log_streams: bool = False
    """Log follows stay open after their container ended, until the client leaves (kwok's
    kubelet API; the kubelet ends them)."""
    drop_log_after: list[int] = field(default_factory=list)
    """The next log follows are cut mid-chunk after this many lines each (the API server
    restarting under a `logs -f`)."""


class _Dropped(Exception):
    pass


class FakeKubeApiServer(ObjectStore):
    def __init__(self, history: int = 10_000) -> None:
        super().__init__(history)
        self.faults = Faults()
        self.foreground_delay_s = 0.3
        """How long a Foreground delete keeps the object (its pods terminating)."""
        self.bookmarks_sent = 0
        self.requests: list[tuple[str, str]] = []
        """(method, path with query) of every request, for counting retries."""
        self.open_streams = 0
        """Watches and log follows being served now; like the real apiserver, a stream whose
        client closed its connection ends, even while it has nothing to send."""
        self._streams_lock = threading.Lock()
        self.operator = None  # set by FakeOperator
        self.kueue = None  # set by FakeKueue
        self.batch = None  # set by FakeBatchController (batch/v1 Jobs)
        self.trainer = None  # set by FakeTrainer (TrainJobs, their JobSets and pods)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> FakeKubeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def write_kubeconfig(self, path: Path, context: str = "fake") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [
                {"name": context, "context": {"cluster": "fake", "user": "tester"}},
            ],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def count(self, method: str, fragment: str) -> int:
        """How many requests with this method had `fragment` in their path."""
        return sum(1 for m, p in self.requests if m == method and fragment in p)


def _mark_deleting(obj: dict) -> None:
    meta = obj["metadata"]
    meta["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta["finalizers"] = [*meta.get("finalizers", []), "foregroundDeletion"]


def _group(path: str) -> str:
    """The API group of a request path: "" for /api/v1/..., else /apis/<group>/<version>/..."""
    parts = urlsplit(path).path.split("/")
    return parts[2] if len(parts) > 2 and parts[1] == "apis" else ""


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def _handler_for(server: FakeKubeApiServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as separate writes: without TCP_NODELAY, Nagle plus the
            # client's delayed ACK add ~40 ms to every response.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        # -- plumbing -----------------------------------------------------------------------
        def _send(self, code: int, body: dict | str, content_type="application/json") -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, reason: str, message: str) -> None:
            self._send(code, _status(code, reason, message))

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _start_stream(self, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def _end_stream(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _client_gone(self) -> bool:
            """The client closed its end (a readable socket with nothing to read)."""
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            try:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        @contextlib.contextmanager
        def _counted_stream(self):
            with server._streams_lock:
                server.open_streams += 1
            try:
                yield
            finally:
                with server._streams_lock:
                    server.open_streams -= 1

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"null")

        def _route(self):
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            parts = [p for p in url.path.split("/") if p]
            if parts[:1] == ["api"]:
                parts = parts[2:]
            elif parts[:1] == ["apis"]:
                parts = parts[3:]
            else:
                return None
            namespace = ""
            if len(parts) >= 3 and parts[0] == "namespaces":
                namespace, parts = parts[1], parts[2:]
            plural = parts[0] if parts else ""
            name = parts[1] if len(parts) > 1 else None
            sub = parts[2] if len(parts) > 2 else None
            return plural, namespace, name, sub, query

        def _faulted_read(self) -> bool:
            faults = server.faults
            if callable(faults.outage) and faults.outage():
                self._error(503, "ServiceUnavailable", "injected outage")
                return True
            if faults.read_stalls > 0:
                faults.read_stalls -= 1
                time.sleep(faults.stall_seconds)
            if faults.read_errors:
                code = faults.read_errors.pop(0)
                self._error(code, "InternalError", "injected server error")
                return True
            return False

        # -- verbs ----------------------------------------------------------------------------
        def do_GET(self) -> None:
            server.requests.append(("GET", self.path))
            route = self._route()
            if route is None:
                return self._error(404, "NotFound", self.path)
            plural, namespace, name, sub, query = route
            if self._faulted_read():
                return None
            if query.get("watch", ["false"])[0].lower() == "true":
                return self._watch(plural, namespace, query)
            if sub == "log":
                return self._log(namespace, name, query)
            if name is None:
                items = server.list(plural, namespace, parse_selector(query))
                return self._send(
                    200,
                    {
                        "kind": f"{KINDS.get(plural, 'Object')}List",
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(server.rv)},
                        "items": items,
                    },
                )
            obj = server.get(plural, name, namespace)
            if obj is None:
                return self._error(404, "NotFound", f'{plural} "{name}" not found')
            return self._send(200, obj)

        def do_POST(self) -> None:
            server.requests.append(("POST", self.path))
            plural, namespace, _, _, _ = self._route()
            obj = self._body()
            name = obj["metadata"]["name"]
            if name in server.faults.reject_create:
                code = server.faults.reject_create[name]
                return self._error(code, "Forbidden" if code == 403 else "Invalid", "injected")
            if name in server.faults.conflict_on_create:
                server.faults.conflict_on_create.discard(name)
                if server.get(plural, name, namespace) is None:
                    self._create(plural, namespace, copy.deepcopy(obj))
                return self._error(409, "AlreadyExists", f'{plural} "{name}" already exists')
            if server.get(plural, name, namespace) is not None:
                return self._error(409, "AlreadyExists", f'{plural} "{name}" already exists')
            if plural == "trainjobs" and server.trainer is not None:
                refused = server.trainer.admission_error(obj)
                if refused:
                    return self._error(422, "Invalid", f'TrainJob "{name}" is invalid: {refused}')
            return self._send(201, self._create(plural, namespace, obj))

        def _create(self, plural: str, namespace: str, obj: dict) -> dict:
            created = server.put(plural, obj, namespace)
            if plural in ("pytorchjobs", "trainjobs") and server.kueue is not None:
                server.kueue.job_created(created)
            if plural == "pytorchjobs" and server.operator is not None:
                server.operator.job_created(created)
            if plural == "trainjobs" and server.trainer is not None:
                server.trainer.job_created(created)
            if plural == "jobs" and server.batch is not None:
                server.batch.job_created(created)
            return created

        def do_PATCH(self) -> None:
            server.requests.append(("PATCH", self.path))
            plural, namespace, name, sub, _ = self._route()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = self.headers.get("Content-Type", "")
            # Read, patch and write as one step, as the apiserver's GuaranteedUpdate.
            with server.cond:
                current = server.get(plural, name, namespace)
                if current is None:
                    return self._error(404, "NotFound", f'{plural} "{name}" not found')
                try:
                    group = _group(self.path)
                    patched = apply_patch(group, plural, content_type, current, body, sub)
                except PatchError as refused:
                    return self._error(refused.code, refused.reason, refused.message)
                updated = server.put(plural, patched, namespace)
            if plural == "pytorchjobs" and server.operator is not None:
                server.operator.job_patched(updated)
            if plural == "trainjobs" and server.trainer is not None:
                server.trainer.job_patched(updated)
            if plural in ("pytorchjobs", "trainjobs") and server.kueue is not None:
                server.kueue.job_patched(updated)
                updated = server.get(plural, name, namespace) or updated
            if plural == "workloads" and server.kueue is not None:
                server.kueue.workload_patched(updated)
            return self._send(200, updated)

        def do_PUT(self) -> None:
            server.requests.append(("PUT", self.path))
            plural, namespace, name, _, _ = self._route()
            obj = self._body()
            with server.cond:  # check and write as one step, as etcd's compare-and-swap
                existing = server.get(plural, name, namespace)
                if existing is None:
                    return self._error(404, "NotFound", f'{plural} "{name}" not found')
                sent = obj["metadata"].get("resourceVersion")
                if not sent:
                    return self._error(
                        422,
                        "Invalid",
                        f'{plural} "{name}" is invalid: metadata.resourceVersion: Invalid value: '
                        "0x0: must be specified for an update",
                    )
                if sent != existing["metadata"]["resourceVersion"]:
                    return self._error(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                        "modified; please apply your changes to the latest version and try again",
                    )
                obj["metadata"]["uid"] = existing["metadata"]["uid"]
                return self._send(200, server.put(plural, obj, namespace))

        def do_DELETE(self) -> None:
            server.requests.append(("DELETE", self.path))
            plural, namespace, name, _, _ = self._route()
            options = self._body() or {}
            policy = options.get("propagationPolicy", "Background")
            existing = server.get(plural, name, namespace)
            if existing is None:
                return self._error(404, "NotFound", f'{plural} "{name}" not found')
            if plural == "pytorchjobs" and server.operator is not None:
                server.operator.job_deleted(name)
            if plural == "trainjobs" and server.trainer is not None:
                server.trainer.job_deleted(name)
            if policy == "Foreground":
                # The object stays, marked, until its dependents are gone (pods take their
                # grace period): a create of the same name meanwhile gets 409 AlreadyExists.
                marked = server.update(plural, name, namespace, _mark_deleting)
                timer = threading.Timer(
                    server.foreground_delay_s, server.remove, (plural, name, namespace)
                )
                timer.daemon = True
                timer.start()
                return self._send(200, marked)
            if policy == "Orphan":
                server.orphan_dependents(existing["metadata"]["uid"])
            server.remove(plural, name, namespace)
            return self._send(200, _status(200, "", "deleted") | {"status": "Success"})

        # -- streams --------------------------------------------------------------------------
        def _watch(self, plural: str, namespace: str, query: dict) -> None:
            with self._counted_stream():
                return self._watch_counted(plural, namespace, query)

        def _watch_counted(self, plural: str, namespace: str, query: dict) -> None:
            faults = server.faults
            if faults.gone_on_watch > 0:
                faults.gone_on_watch -= 1
                self._start_stream("application/json")
                gone = _status(410, "Expired", "too old resource version")
                self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return self._end_stream()
            selector = parse_selector(query)
            timeout = float(query.get("timeoutSeconds", ["30"])[0])
            drop_after = faults.drop_watch_after.pop(0) if faults.drop_watch_after else None
            since = query.get("resourceVersion", [""])[0]
            bookmarks = query.get("allowWatchBookmarks", ["false"])[0].lower() == "true"
            self._start_stream("application/json")
            sent = 0
            deadline = time.monotonic() + timeout
            try:
                if drop_after == 0:
                    raise _Dropped
                with server.cond:
                    if since in ("", "0"):
                        pending = [
                            (server.rv, plural, "ADDED", o)
                            for o in server.list(plural, namespace, selector)
                        ]
                        cursor = server.rv
                    else:
                        cursor = int(since)
                        if server.events and cursor < server.events[0][0] - 1:
                            gone = _status(410, "Expired", "too old resource version")
                            pending = [(cursor, plural, "ERROR", gone)]
                        else:
                            pending = []
                while True:
                    for _, _, event_type, obj in pending:
                        if drop_after is not None and sent >= drop_after:
                            raise _Dropped
                        line = json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
                        self._chunk(line)
                        sent += 1
                        if event_type == "ERROR":
                            return self._end_stream()
                    with server.cond:
                        pending = self._events_after(cursor, plural, namespace, selector)
                        while not pending and time.monotonic() < deadline:
                            server.cond.wait(timeout=min(0.2, deadline - time.monotonic()))
                            if getattr(server, "stopped", False) or self._client_gone():
                                break
                            pending = self._events_after(cursor, plural, namespace, selector)
                            if not pending and bookmarks:
                                # Idle: tell the client how far it is (only when it asked).
                                mark = {"kind": KINDS.get(plural, "Object"), "apiVersion": "v1"}
                                mark["metadata"] = {"resourceVersion": str(server.rv)}
                                pending = [(server.rv, plural, "BOOKMARK", mark)]
                                server.bookmarks_sent += 1
                        if not pending:
                            return self._end_stream()
                        cursor = max(rv for rv, *_ in pending)
            except _Dropped:
                # Cut the connection mid-stream: no terminating chunk, as on a network drop.
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _events_after(self, cursor, plural, namespace, selector) -> list:
            return [
                e
                for e in server.events
                if e[0] > cursor
                and e[1] == plural
                and (not namespace or e[3]["metadata"].get("namespace") == namespace)
                and matches(e[3], selector)
            ]

        def _log(self, namespace: str, name: str, query: dict) -> None:
            operator = server.operator
            pod = server.get("pods", name, namespace)
            if pod is None or operator is None:
                return self._error(404, "NotFound", f'pods "{name}" not found')
            uid = pod["metadata"]["uid"]
            if server.trainer is not None and "jobset.sigs.k8s.io/jobset-name" in (
                pod["metadata"].get("labels") or {}
            ):
                operator = server.trainer  # a TrainJob's (JobSet's) pod
            if query.get("follow", ["false"])[0].lower() != "true":
                text = "".join(line + "\n" for line in operator.log_lines(uid))
                return self._send(200, text, "text/plain")
            with self._counted_stream():
                return self._follow_log(uid, operator)

        def _follow_log(self, uid: str, operator) -> None:
            self._start_stream("text/plain")
            if server.faults.silent_log_streams > 0:
                server.faults.silent_log_streams -= 1
                with server.cond:
                    server.cond.wait_for(lambda: getattr(server, "stopped", False), timeout=60)
                self.close_connection = True
                return None
            sent = 0
            faults = server.faults
            drop_after = faults.drop_log_after.pop(0) if faults.drop_log_after else None
            try:
                while True:
                    lines = operator.log_lines(uid)
                    for line in lines[sent:]:
                        if drop_after is not None and sent >= drop_after:
                            raise _Dropped
                        self._chunk(line.encode() + b"\n")
                        sent += 1
                    if operator.log_closed(uid) and not faults.open_log_streams:
                        return self._end_stream()
                    if self._client_gone():
                        self.close_connection = True
                        return None
                    with server.cond:
                        server.cond.wait(timeout=0.05)
            except _Dropped:  # no terminating chunk, as when the connection is cut
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler
