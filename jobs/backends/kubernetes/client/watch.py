"""Following a run: its state transitions through a watch stream, and a pod's log.

The watch resumes from the last resourceVersion it saw when the stream ends or drops, so no
transition is lost or reported twice; a 410 Gone (history expired) re-reads the job and goes
on from there. Reconnects without progress are bounded; so is waiting for a pod's log.

Both ride out an unreachable or failing API server (a kube-apiserver or etcd restart: refused
connections, 5xx, streams cut mid-way) for up to MAX_OUTAGE_S, backing off, then end with one
line. A followed log resumes from where it was cut (lines already shown are skipped); when the
container it was reading ended or was replaced before the API server came back, one
`[trainstack]` line says after which line of which pod lines may be missing.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator

from jobs.backends.kubernetes.client.api import (
    Cluster,
    ClusterError,
    describe,
    is_transient,
    status_of,
)
from jobs.backends.kubernetes.client.kinds import (
    BATCH_JOB_NAME_LABEL,
    COMPLETION_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    PYTORCHJOB,
    RESTART_ATTEMPT_LABEL,
    JobKind,
    kind_of,
)
from jobs.backends.kubernetes.client.state import (
    check_rank,
    is_final,
    job_state,
    pod_for_rank,
    went_back,
)

MAX_RECONNECTS = 5
"""Consecutive log connections refused for another reason than an outage (no line in
between) before giving up."""
MAX_OUTAGE_S = 1800.0
"""How long `wait_for_end` keeps reconnecting through an unreachable or failing API server
(transient errors only: 429, 5xx, timeouts, dropped connections) before giving up: a control
plane upgrade or a network blip must not end a --wait (and its second-line restarts)."""
FORBIDDEN_AFTER_OUTAGE_S = 30.0
"""How long refusals (403) right after an outage are taken for an API server that came back
before its authorizer: kube-apiserver serves requests before its RBAC informers have synced
(k8s.io/apiserver v0.35.4, pkg/server/genericapiserver.go `NonBlockingRunWithContext`: `Serve`,
then `RunPostStartHooks`, whose generic-apiserver-start-informers starts them; config.go adds
the informer-sync readyz check), and plugin/pkg/auth/authorizer/rbac/rbac.go (kubernetes
v1.35.4) denies what its empty listers hold no binding for. client-go's reflector retries such
a refusal with backoff (tools/cache/reflector.go `RunWithContext`). A 403 with no outage before
it is final at once."""
MAX_BACKOFF_S = 30.0
WATCH_WINDOW_S = 60
"""Server-side timeout of one watch request; the watch then reconnects from where it was."""
LOG_READ_TIMEOUT_S = 120.0
"""A followed log silent this long is read again from a new connection (a dropped connection
sends nothing, not even an end); lines already shown are skipped."""
CONTAINER = PYTORCHJOB.container


class FollowCancelled(Exception):
    """A follow was stopped by its `Cancellation` (its reader left)."""


class Cancellation:
    """Stops a follow from another thread within moments: sets a flag the loops check and
    shuts down the read side of every open stream, which ends a read blocked on it (a watch
    window is a minute, a silent log two: waiting for them would keep the API server's
    streams open long after the reader left)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._open: set = set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()
        with self._lock:
            responses = list(self._open)
        for response in responses:
            _shutdown(response)

    def interrupt(self) -> None:
        """Shut down every open stream without stopping the follow: its loops look again (a
        log stream kwok keeps open after its container ended: `_follow_log`)."""
        with self._lock:
            responses = list(self._open)
        for response in responses:
            _shutdown(response)

    def sleep(self, seconds: float, sleep: Callable[[float], None]) -> None:
        """`sleep(seconds)` unless cancelled; then raise FollowCancelled."""
        if self.is_set():
            raise FollowCancelled
        sleep(seconds)
        if self.is_set():
            raise FollowCancelled

    def tracked(self, func: Callable) -> Callable:
        """`func` (a client method that returns a streaming response) with its responses
        registered while open; `functools.wraps` keeps the docstring the watch reads."""

        @functools.wraps(func)
        def call(*args, **kwargs):
            response = func(*args, **kwargs)
            with self._lock:
                self._open.add(response)
            if self.is_set():
                _shutdown(response)
            return response

        return call

    def release(self) -> None:
        """Forget responses that are closed (called after each stream ends)."""
        with self._lock:
            self._open = {r for r in self._open if not getattr(r, "closed", False)}


def _shutdown(response) -> None:
    try:
        response.shutdown()  # urllib3 >= 2.3: shutdown(SHUT_RD) of the socket
    except (AttributeError, ValueError, RuntimeError, OSError):
        with contextlib.suppress(Exception):  # already closed or released
            response.close()


class _Outage:
    """Transient failures in a row (429, 5xx, timeouts, refused or dropped connections) and
    since when: each backs off (doubling, capped at MAX_BACKOFF_S); past MAX_OUTAGE_S, or on a
    failure that is not transient, one ClusterError naming `what`."""

    def __init__(self, cluster: Cluster, what: str) -> None:
        self.cluster, self.what = cluster, what
        self.failures, self.since, self.forbidden_since = 0, None, None

    def over(self) -> None:
        self.failures, self.since, self.forbidden_since = 0, None, None

    def failed(self, exc: BaseException, cancel: Cancellation) -> None:
        if isinstance(exc, ClusterError) and exc.__cause__ is not None:
            exc = exc.__cause__  # a read that ran out of its own retries
        now = self.cluster.clock()
        if not is_transient(exc) and not self._authorizer_catching_up(exc, now):
            raise ClusterError(f"{self.what} failed: {describe(exc)}") from exc
        self.failures += 1
        self.since = now if self.since is None else self.since
        if now - self.since > MAX_OUTAGE_S:
            raise ClusterError(
                f"{self.what} failed {self.failures} times over {now - self.since:.0f}s: "
                f"{describe(exc)}"
            ) from exc
        base = self.cluster.retry.base_delay_s
        cancel.sleep(min(base * 2 ** min(self.failures, 20), MAX_BACKOFF_S), self.cluster.sleep)

    def _authorizer_catching_up(self, exc: BaseException, now: float) -> bool:
        """A 403 during an outage (transient failures before it, no success since), for at
        most FORBIDDEN_AFTER_OUTAGE_S from the first: the API server restarted and its RBAC
        authorizer has not caught up (FORBIDDEN_AFTER_OUTAGE_S)."""
        if status_of(exc) != 403 or self.since is None:
            return False
        self.forbidden_since = now if self.forbidden_since is None else self.forbidden_since
        return now - self.forbidden_since <= FORBIDDEN_AFTER_OUTAGE_S


def wait_for_end(
    cluster: Cluster,
    name: str,
    on_state: Callable[[str, dict], None] = lambda state, job: None,
    kind: JobKind = PYTORCHJOB,
    cancel: Cancellation | None = None,
) -> dict | None:
    """Block until the job reaches a final state; return it (None when it was deleted).

    `on_state(state, job)` is called once per state transition, starting with the current one.
    How long a run may take is the job's own business (`job.active_deadline_seconds`).
    `cancel` set: raises FollowCancelled within moments, its watch closed.
    """
    from kubernetes import watch  # lazy: start-up (kubernetes client)

    last_state = None

    def observe(job: dict) -> bool:
        nonlocal last_state
        state = job_state(job)
        if state != last_state and not went_back(last_state, state):
            last_state = state
            on_state(state, job)
        return is_final(state)

    cancel = cancel or Cancellation()
    list_jobs = cancel.tracked(cluster.custom.list_namespaced_custom_object)
    version = None  # None: (re-)read the job first, e.g. after a 410 Gone
    outage = _Outage(cluster, f"watch {kind.kind} {cluster.namespace}/{name}")
    while True:
        if cancel.is_set():
            raise FollowCancelled
        stream = watch.Watch()
        try:
            if version is None:
                job = cluster.get_job(name, kind)
                if job is None or observe(job):
                    return job
                version = job["metadata"]["resourceVersion"]
            for event in stream.stream(
                list_jobs,
                kind.group,
                kind.version,
                cluster.namespace,
                kind.plural,
                field_selector=f"metadata.name={name}",
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_WINDOW_S,
                _request_timeout=(cluster.retry.connect_timeout_s, WATCH_WINDOW_S + 10),
            ):
                job = event["raw_object"]
                outage.over()
                if event["type"] == "BOOKMARK":  # only a newer resourceVersion to resume from
                    version = job["metadata"]["resourceVersion"]
                    continue
                if event["type"] == "DELETED":
                    stream.stop()
                    return None
                version = job["metadata"]["resourceVersion"]
                if observe(job):
                    stream.stop()
                    return job
        except Exception as exc:
            if cancel.is_set():
                raise FollowCancelled from None
            if status_of(exc) == 410:
                version = None  # our resourceVersion left the server's history: re-read
                continue
            outage.failed(exc, cancel)
        finally:
            cancel.release()


def pod_name(job: dict, rank: int) -> str:
    """A PyTorchJob's pod of node rank `rank` (the operator names them)."""
    replica_type, index = pod_for_rank(job, rank)
    return f"{job['metadata']['name']}-{replica_type}-{index}"


def rank_pod(cluster: Cluster, job: dict, rank: int) -> dict | None:
    """The current pod of node rank `rank` (ValueError for a rank the job does not have). A
    PyTorchJob's pods are named by rank; a TrainJob's are its JobSet's, found by the JobSet's
    and the Indexed Job's labels, the newest restart attempt first; a RayJob's one log is its
    submitter Job's newest pod's."""
    kind = kind_of(job)
    if not kind.runs_on_jobset and kind.log_ranks:
        return _get_pod(cluster, pod_name(job, rank))
    check_rank(job, rank)
    name = job["metadata"]["name"]
    # A submitter's pods are its Job's (named after the job: KubeRay's createNewK8sJob); the
    # Job controller labels them with the Job's name.
    selector = (
        f"{BATCH_JOB_NAME_LABEL}={name}"
        if not kind.log_ranks
        else f"{JOBSET_NAME_LABEL}={name},{COMPLETION_INDEX_LABEL}={rank}"
    )
    listing = cluster.call(
        f"list pods of {cluster.namespace}/{name}",
        cluster.core.list_namespaced_pod,
        cluster.namespace,
        label_selector=selector,
    )
    pods = [
        p
        for p in cluster.core.api_client.sanitize_for_serialization(listing).get("items", [])
        if not p["metadata"].get("deletionTimestamp")
    ]

    def newest(pod: dict) -> tuple[int, str]:
        labels = pod["metadata"].get("labels") or {}
        return int(labels.get(RESTART_ATTEMPT_LABEL, 0)), pod["metadata"].get(
            "creationTimestamp", ""
        )

    return max(pods, key=newest, default=None)


def rank_pod_label(job: dict, rank: int) -> str:
    """How messages name a rank's pod."""
    kind = kind_of(job)
    if not kind.log_ranks:
        return f"{job['metadata']['name']}'s submitter"
    if not kind.runs_on_jobset:
        return pod_name(job, rank)
    return f"{job['metadata']['name']} rank {rank}"


def read_log(cluster: Cluster, pod: str, container: str = CONTAINER) -> list[str] | None:
    """The pod's log so far, as lines; None when the pod is gone."""
    text = cluster.call_or_none(
        f"read log of pod {cluster.namespace}/{pod}",
        cluster.core.read_namespaced_pod_log,
        pod,
        cluster.namespace,
        container=container,
    )
    return None if text is None else text.splitlines()


def follow_log(
    cluster: Cluster,
    name: str,
    rank: int = 0,
    poll_s: float = 0.5,
    start_timeout_s: float = 1800,
    kind: JobKind = PYTORCHJOB,
    cancel: Cancellation | None = None,
) -> Iterator[str]:
    """Stream rank `rank`'s log until the job ends, across pod restarts, each line once.

    A replaced pod (new uid) or restarted container is followed from its first line; a
    reconnect to the same container skips the lines already yielded; an ended pod, once read
    to its end, is not read again while its successor is awaited. Waiting for a pod or
    container to start is bounded by `start_timeout_s` (nodes may have to scale up first);
    an API outage by MAX_OUTAGE_S; connections refused otherwise by MAX_RECONNECTS. A stream
    cut before its container ended is read again (the job's end does not stop that); if the
    container is gone by then, one `[trainstack]` line says where lines may be missing.
    `cancel` set: ends within moments, its stream closed.
    """
    cancel = cancel or Cancellation()
    read_log_stream = cancel.tracked(cluster.core.read_namespaced_pod_log)
    try:
        yield from _follow_log(
            cluster, name, rank, poll_s, start_timeout_s, cancel, read_log_stream, kind
        )
    except FollowCancelled:
        return
    finally:
        cancel.release()


def _follow_log(cluster, name, rank, poll_s, start_timeout_s, cancel, read_log_stream, kind):
    from kubernetes import watch  # lazy: start-up (kubernetes client)

    yielded: dict[str, int] = {}
    drained: set[str] = set()  # containers of ended pods read to their end: nothing more comes
    failures = 0  # connections refused for another reason than an outage, in a row
    outage = _Outage(cluster, f"follow log of {kind.kind} {cluster.namespace}/{name} rank {rank}")
    cut: tuple[str, str] | None = None  # (container, pod): its stream broke before its end
    waiting_since = time.monotonic()
    while True:
        if cancel.is_set():
            return
        try:
            job = cluster.get_job(name, kind)
            pod = None if job is None else rank_pod(cluster, job, rank)
        except ClusterError as err:
            outage.failed(err, cancel)
            continue
        outage.over()
        container = f"{pod['metadata']['uid']}/{_restarts(pod, kind.log_container)}" if pod else ""
        if cut is not None and container != cut[0]:
            # The container we were reading when its stream broke ended (or its pod went)
            # before we could read it again: what it wrote after our last line is not here.
            seen_lines = yielded.get(cut[0], 0)
            yield (
                f"[trainstack] {name}: rank {rank}'s log may be missing lines after line "
                f"{seen_lines} of pod {cut[1]}: its container ended while the log stream was cut"
            )
            cut = None
        if job is None:
            return
        phase = ((pod or {}).get("status") or {}).get("phase", "Pending")
        if pod is None or phase == "Pending" or container in drained:
            if is_final(job_state(job)):
                return
            if time.monotonic() - waiting_since > start_timeout_s:
                raise ClusterError(
                    f"pod {rank_pod_label(job, rank)} did not start in {start_timeout_s:.0f}s"
                )
            cancel.sleep(poll_s, cluster.sleep)
            continue
        if phase in ("Succeeded", "Failed"):
            # An ended container's log is read to its end, not followed: the kubelet ends the
            # follow of an exited container, kwok's kubelet API never does.
            try:
                rest = read_log(cluster, pod["metadata"]["name"], kind.log_container)
            except ClusterError as err:
                outage.failed(err, cancel)
                continue
            yield from _unseen(rest or [], container, yielded)
            cut = None
            drained.add(container)
            continue
        seen = 0
        try:
            for line in watch.Watch().stream(
                read_log_stream,
                name=pod["metadata"]["name"],
                namespace=cluster.namespace,
                container=kind.log_container,
                _request_timeout=(cluster.retry.connect_timeout_s, LOG_READ_TIMEOUT_S),
            ):
                seen += 1
                if seen > yielded.get(container, 0):
                    yielded[container] = seen
                    failures = 0
                    yield line
            if cancel.is_set():
                return
            cut = None  # read to the end the API server sent
            if phase in ("Succeeded", "Failed"):
                drained.add(container)
        except Exception as exc:
            if cancel.is_set():
                return
            if status_of(exc) == 400 and time.monotonic() - waiting_since < start_timeout_s:
                cancel.sleep(poll_s, cluster.sleep)  # the container is (re)starting: no log yet
                continue
            cut = (container, pod["metadata"]["name"])
            if _read_timed_out(exc):  # silent: maybe dropped; a fresh connection tells
                continue
            if is_transient(exc):  # an outage (an API server restart): read it again after
                outage.failed(exc, cancel)
                continue
            failures += 1
            if failures > MAX_RECONNECTS:
                raise ClusterError(
                    f"follow log of pod {cluster.namespace}/{pod['metadata']['name']} failed "
                    f"{failures} times in a row: {describe(exc)}"
                ) from exc
            cancel.sleep(poll_s, cluster.sleep)
            continue
        try:
            job = cluster.get_job(name, kind)
        except ClusterError as err:
            # The stream ended as the API server went away (a restart closes its streams):
            # maybe before the container's end. Read it again once the server is back.
            cut = (container, pod["metadata"]["name"])
            outage.failed(err, cancel)
            continue
        if job is None:
            return
        if is_final(job_state(job)):
            # What a stream ended early (`Cancellation.interrupt`) did not bring.
            with contextlib.suppress(ClusterError):
                rest = read_log(cluster, pod["metadata"]["name"], kind.log_container)
                yield from _unseen(rest or [], container, yielded)
            return
        # The pod ended or was replaced while the job goes on: follow its successor.
        waiting_since = time.monotonic()
        cancel.sleep(poll_s, cluster.sleep)


def _unseen(lines: list[str], container: str, yielded: dict[str, int]) -> Iterator[str]:
    """The lines of `container`'s log after those already yielded."""
    for line in lines[yielded.get(container, 0) :]:
        yielded[container] = yielded.get(container, 0) + 1
        yield line


def _read_timed_out(exc: BaseException) -> bool:
    from urllib3.exceptions import (
        ProtocolError,
        ReadTimeoutError,
    )  # lazy: start-up (kubernetes client)

    seen: BaseException | None = exc
    while seen is not None:  # urllib3 wraps the socket timeout in ProtocolError mid-stream
        if isinstance(seen, ReadTimeoutError | TimeoutError):
            return True
        if isinstance(seen, ProtocolError) and any(
            isinstance(arg, ReadTimeoutError | TimeoutError) for arg in seen.args
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _restarts(pod: dict, container: str = CONTAINER) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c.get("restartCount", 0) for c in statuses if c.get("name") == container), 0)


def _get_pod(cluster: Cluster, name: str) -> dict | None:
    pod = cluster.call_or_none(
        f"get pod {cluster.namespace}/{name}",
        cluster.core.read_namespaced_pod,
        name,
        cluster.namespace,
    )
    return None if pod is None else cluster.core.api_client.sanitize_for_serialization(pod)
