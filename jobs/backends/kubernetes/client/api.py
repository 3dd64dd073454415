"""The cluster connection: client setup, one-line errors and bounded retries.

Every call to the API server goes through `Cluster.call`, so an `ApiException` or a urllib3
error reaches the user as one line (action, object, status, reason) with the cause chained,
and transient failures (429, 5xx, timeouts, dropped connections) are retried a bounded number
of times with exponential backoff. The client's own urllib3 retries are switched off so that
this is the only retry loop.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from jobs.backends.kubernetes.client.kinds import PYTORCHJOB, JobKind
from jobs.errors import BackendError

T = TypeVar("T")

GROUP, VERSION, PLURAL = PYTORCHJOB.group, PYTORCHJOB.version, PYTORCHJOB.plural
CRD_NAME = f"{PLURAL}.{GROUP}"
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


class ClusterError(BackendError):
    """A cluster operation failed; the message is one line meant for the user."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    """Tries per call, including the first."""
    base_delay_s: float = 0.25
    """Sleep before the second try; doubles each time."""
    max_delay_s: float = 4.0
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    """Per-request read timeout of non-streaming calls."""

    def backoff_s(self, failures: int) -> float:
        """Sleep after the `failures`-th failure in a row: exponential, capped."""
        return min(self.base_delay_s * 2 ** (failures - 1), self.max_delay_s)


DEFAULT_RETRY = RetryPolicy()


def is_transient(exc: BaseException) -> bool:
    from kubernetes.client.exceptions import ApiException  # lazy: start-up (kubernetes client)
    from urllib3.exceptions import HTTPError  # lazy: start-up (kubernetes client)

    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUSES or not exc.status
    return isinstance(exc, HTTPError | OSError)


def describe(exc: BaseException) -> str:
    """`<status> <reason>: <message>` of an ApiException, or the urllib3 error, on one line."""
    from kubernetes.client.exceptions import ApiException  # lazy: start-up (kubernetes client)

    if isinstance(exc, ApiException):
        message = ""
        try:
            message = json.loads(exc.body or "{}").get("message", "")
        except (ValueError, AttributeError):
            message = str(exc.body or "")[:200]
        text = f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def status_of(exc: BaseException) -> int | None:
    from kubernetes.client.exceptions import ApiException  # lazy: start-up (kubernetes client)

    return exc.status if isinstance(exc, ApiException) else None


@dataclass
class Cluster:
    """API handles for one kubeconfig context and namespace."""

    custom: Any
    """kubernetes.client.CustomObjectsApi"""
    core: Any
    """kubernetes.client.CoreV1Api"""
    extensions: Any
    """kubernetes.client.ApiextensionsV1Api"""
    namespace: str
    networking: Any = None
    """kubernetes.client.NetworkingV1Api (each run's NetworkPolicy)"""
    retry: RetryPolicy = field(default_factory=lambda: DEFAULT_RETRY)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    """Seconds, for how long an outage has lasted (tests pass a fake clock with `sleep`)."""

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.retry.connect_timeout_s, self.retry.read_timeout_s)

    def call(self, action: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one API call, retrying transient failures; raise ClusterError on the rest.

        ApiExceptions with a status the caller handles (e.g. 404, 409) are re-raised as is when
        listed in `kwargs["expect"]`.
        """
        expect = kwargs.pop("expect", ())
        kwargs.setdefault("_request_timeout", self.timeout)
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if status_of(exc) in expect:
                    raise
                if not is_transient(exc):
                    raise ClusterError(f"{action} failed: {describe(exc)}") from exc
                if attempt == self.retry.attempts:
                    raise ClusterError(
                        f"{action} failed after {attempt} attempts: {describe(exc)}"
                    ) from exc
                self.sleep(self.retry.backoff_s(attempt))
        raise AssertionError("unreachable")

    def call_or_none(
        self, action: str, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T | None:
        """`call`, but None when the object does not exist (404)."""
        try:
            return self.call(action, fn, *args, expect=(404,), **kwargs)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise

    # -- job shorthands (PyTorchJob unless `kind` says otherwise) --------------------------
    def get_job(self, name: str, kind: JobKind = PYTORCHJOB) -> dict | None:
        """The job `name` of `kind`, or None when it does not exist."""
        return self.call_or_none(
            f"get {kind.kind} {self.namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            kind.group,
            kind.version,
            self.namespace,
            kind.plural,
            name,
        )

    def list_jobs(self, label_selector: str = "", kind: JobKind = PYTORCHJOB) -> list[dict]:
        listing = self.call(
            f"list {kind.kind}s in {self.namespace}",
            self.custom.list_namespaced_custom_object,
            kind.group,
            kind.version,
            self.namespace,
            kind.plural,
            label_selector=label_selector,
        )
        return listing.get("items", [])

    def patch_job(self, name: str, patch: dict, kind: JobKind = PYTORCHJOB) -> dict | None:
        """Merge-patch the job; None when it no longer exists."""
        return self.call_or_none(
            f"patch {kind.kind} {self.namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            kind.group,
            kind.version,
            self.namespace,
            kind.plural,
            name,
            patch,
        )


def kubeconfig_file(kubeconfig: str | None) -> str:
    """The kubeconfig the client reads first: `cluster.kubeconfig`, else the first entry of
    $KUBECONFIG (a path list, merged by the client), else ~/.kube/config."""
    if kubeconfig:
        return os.path.expanduser(kubeconfig)
    listed = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return os.path.expanduser(listed or "~/.kube/config")


def connect(
    kubeconfig: str | None,
    context: str | None,
    namespace: str,
    retry: RetryPolicy | None = None,
) -> Cluster:
    """API handles from `cluster.kubeconfig`/`cluster.context`, the default kubeconfig, or the
    in-cluster service account when running in a pod without a kubeconfig."""
    from kubernetes import client, config  # lazy: start-up (kubernetes client)

    configuration = client.Configuration()
    source = kubeconfig_file(kubeconfig)
    try:
        in_cluster = (
            kubeconfig is None
            and "KUBERNETES_SERVICE_HOST" in os.environ
            and not os.path.exists(source)
        )
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            # $KUBECONFIG as it is now: the client reads its default once, when it is first
            # imported, so a process that sets it later (a notebook, the Python API's caller)
            # would get the old one. A path list stays a list (the client merges it).
            config.load_kube_config(
                config_file=kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config",
                context=context,
                client_configuration=configuration,
            )
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        where = f"context {context!r} of " if context else ""
        raise ClusterError(
            f"cannot load {where}kubeconfig {source} (set cluster.kubeconfig / cluster.context, "
            f"or select a stack): {' '.join(str(exc).split())}"
        ) from exc
    configuration.retries = False  # Cluster.call is the one bounded retry loop
    api_client = client.ApiClient(configuration)
    return Cluster(
        custom=client.CustomObjectsApi(api_client),
        core=client.CoreV1Api(api_client),
        extensions=client.ApiextensionsV1Api(api_client),
        namespace=namespace,
        networking=client.NetworkingV1Api(api_client),
        retry=retry or DEFAULT_RETRY,
    )
