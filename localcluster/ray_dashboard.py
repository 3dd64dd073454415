"""A stand-in for the Ray head's dashboard, as KubeRay's operator asks it about a RayJob.

No container runs on the local cluster, so there is no Ray head, yet while a RayJob runs the
operator polls the head's Jobs API for the Ray job's state (KubeRay v1.6.2,
ray-operator/controllers/ray/rayjob_controller.go, the Running case: GetJobInfo). Without
--use-kubernetes-proxy its client is `http.Client{Timeout: 2s}` on
`http://<head service>.<namespace>.svc.cluster.local:8265` (controllers/ray/utils/util.go,
GetRayDashboardClientFunc): Go's default transport, which takes HTTP_PROXY from the
environment. localcluster starts the operator with HTTP_PROXY pointing here, so its requests
arrive with the absolute URL in the request line (RFC 9112 section 3.2.2) and the host names
the RayJob's head (its `status.dashboardURL`).

It answers as Ray 2.60's Jobs REST API does (ray's dashboard/modules/job/job_head.py; the
body of a job is `JobDetails.dict()`, pydantic_models.py; the Go side reads it as
controllers/ray/utils/types/dashboard_httpclient.go RayJobInfo):

    GET    /api/version              {"version": "4", "ray_version": ..., ...}
    GET    /api/jobs/                [JobDetails, ...]
    GET    /api/jobs/<id>            JobDetails, or 404 "Job <id> does not exist"
    POST   /api/jobs/<id>/stop       {"stopped": bool}  (false: it was not running)
    DELETE /api/jobs/<id>            {"deleted": true}; 500 while it is not terminal

The Ray job is what `ray job submit` in KubeRay's submitter pod started (K8sJobMode: the pod
runs `ray job submit --no-wait` then `ray job logs --follow`, common/job.go
BuildJobSubmitCommand), read from the cluster: the RayJob whose `status.jobId` is the
submission id, then its submitter Job's pods (localcluster.kube.submitter_pods). A submitter
pod's exit code stands for the driver's (the tests end it: `localcluster finish`):

- no submitter pod yet: not submitted, 404;
- the first submitter pod to end decides, for good (a Ray job never leaves a terminal state):
  Succeeded -> SUCCEEDED, Failed -> FAILED with its exit code;
- none ended: the newest pod Running -> RUNNING, not yet running -> PENDING;
- stopped through this API while not terminal -> STOPPED.

KubeRay ends a K8sJobMode RayJob only once the Ray job is terminal *and* the submitter Job has
finished (and fails it when the Job finished but the job stays unknown or running past
DefaultSubmitterFinishedTimeout), so answering from the submitter pod keeps the two
consistent. A retried submitter pod (the Job's backoffLimit: after a failed one) finds the job
already submitted and only follows its logs, which end at once for a terminal job, with exit
0: `follow_retries` ends such a pod so.

Run by `localcluster up` as `python -m localcluster.ray_dashboard --kubeconfig ... --port ...`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import yaml

from localcluster.kube import (
    EXIT_CODE_ANNOTATION,
    ApiKube,
    Kube,
    submitter_pods,
    timestamp,
)

JOBS = "/api/jobs/"
API_VERSION = "4"
"""ray's dashboard/modules/version.py CURRENT_VERSION (Ray 2.60)."""
RAY_VERSION = "2.60.0"
AGENT_PORT = 52365
"""Ray's dashboard agent HTTP port (ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT): the
`driver_agent_http_address` of a job whose driver runs on the head."""
SUBMITTER_CONTAINER = "ray-job-submitter"
"""KubeRay's utils.SubmitterContainerName."""
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
MESSAGES = {
    "PENDING": "Job has not started yet.",
    "RUNNING": "Job is currently running.",
    "STOPPED": "Job was intentionally stopped.",
    "SUCCEEDED": "Job finished successfully.",
    "FAILED": "Job failed.",
}
"""ray's dashboard/modules/job/common.py JobInfo.__post_init__: the message of each status."""
ENTRYPOINT_ERROR = "JOB_ENTRYPOINT_COMMAND_ERROR"
"""ray's JobErrorType of a driver that exited non-zero (job_supervisor.py)."""


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _terminated(pod: dict) -> dict | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ordered = sorted(statuses, key=lambda s: s.get("name") != SUBMITTER_CONTAINER)
    for status in ordered:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return terminated
    return None


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _pending_message(rayjob: dict, runtime_env: dict) -> str:
    """Ray's PENDING message, with its clauses for entrypoint resources and a runtime env."""
    spec = rayjob.get("spec") or {}
    message = MESSAGES["PENDING"]
    wants = (
        (spec.get("entrypointNumCpus") or 0) > 0
        or (spec.get("entrypointNumGpus") or 0) > 0
        or (spec.get("entrypointMemory") or 0) > 0
        or bool(spec.get("entrypointResources") and json.loads(spec["entrypointResources"]))
    )
    if wants:
        message += (
            " It may be waiting for resources (CPUs, GPUs, memory, custom resources) to "
            "become available."
        )
    if runtime_env:
        message += " It may be waiting for the runtime environment to be set up."
    return message


def job_details(rayjob: dict, pods: list[dict], stopped_at: int | None = None) -> dict | None:
    """The Ray job of `rayjob` as Ray's head reports it (JobDetails, as a JSON object), from
    its submitter pods (oldest first); None: not submitted (no submitter pod yet).
    `stopped_at`: when it was stopped through this API (ms), if it was."""
    if not pods:
        return None
    spec = rayjob.get("spec") or {}
    runtime_env = yaml.safe_load(spec.get("runtimeEnvYAML") or "") or {}
    first = pods[0]
    first_status = first.get("status") or {}
    start = _ms(
        timestamp(first_status.get("startTime") or first["metadata"].get("creationTimestamp"))
    )
    ended = next((pod for pod in pods if _phase(pod) in ("Succeeded", "Failed")), None)
    end_time = exit_code = error_type = None
    message = None
    if stopped_at is not None:
        status, end_time = "STOPPED", stopped_at
    elif ended is not None:
        terminated = _terminated(ended)
        finished = timestamp((terminated or {}).get("finishedAt"))
        end_time = _ms(finished) or int(time.time() * 1000)
        if _phase(ended) == "Succeeded":
            status, exit_code = "SUCCEEDED", 0
        else:
            status, error_type = "FAILED", ENTRYPOINT_ERROR
            exit_code = terminated.get("exitCode") if terminated else None
            if exit_code is not None:
                message = (
                    f"Job entrypoint command failed with exit code {exit_code}. No logs available."
                )
    else:
        status = "RUNNING" if _phase(pods[-1]) == "Running" else "PENDING"
    if message is None:
        message = _pending_message(rayjob, runtime_env) if status == "PENDING" else MESSAGES[status]
    head_ip = (((rayjob.get("status") or {}).get("rayClusterStatus") or {}).get("head") or {}).get(
        "podIP"
    )
    on_head = status != "PENDING" and head_ip
    return {
        "type": "SUBMISSION",
        # No driver process exists here to register a Ray job id or a DriverInfo: as for a
        # submission whose driver has not registered with the GCS.
        "job_id": None,
        "submission_id": rayjob["status"]["jobId"],
        "driver_info": None,
        "status": status,
        "entrypoint": (spec.get("entrypoint") or "").strip(),
        "message": message,
        "error_type": error_type,
        "start_time": start,
        "end_time": end_time,
        "metadata": dict(spec.get("metadata") or {}),
        "runtime_env": runtime_env,
        "driver_agent_http_address": f"http://{head_ip}:{AGENT_PORT}" if on_head else None,
        # A NodeID is 28 bytes: one per head pod, stable for it.
        "driver_node_id": (
            hashlib.sha224(head_ip.encode()).hexdigest() if on_head and head_ip else None
        ),
        "driver_exit_code": exit_code,
    }


Answer = tuple[int, str, str]
"""(HTTP status, body, content type)."""


def _json(status: int, body: object) -> Answer:
    return status, json.dumps(body), "application/json"


def _text(status: int, body: str) -> Answer:
    return status, body, "text/plain"


class Dashboard:
    """The Jobs API of every RayJob's head at once: a request's host (a proxied request's)
    picks the head; a request without one (to this server directly) sees every head."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.clock = clock
        self.stopped: dict[str, int] = {}
        """Submission id -> when it was stopped (ms): the head's memory."""
        self.deleted: set[str] = set()
        self.lock = threading.Lock()

    def _jobs(self, host: str | None) -> list[dict]:
        """The jobs (JobDetails) of the head at `host` (None: every head): submitted, not
        deleted."""
        found = []
        for rayjob in self.kube.rayjobs():
            status = rayjob.get("status") or {}
            submission = status.get("jobId")
            if not submission or submission in self.deleted:
                continue
            if host is not None and (status.get("dashboardURL") or "").lower() != host:
                continue
            job = job_details(
                rayjob, submitter_pods(self.kube, rayjob), self.stopped.get(submission)
            )
            if job is not None:
                found.append(job)
        return found

    def _heads(self) -> set[str]:
        return {
            ((rayjob.get("status") or {}).get("dashboardURL") or "").lower()
            for rayjob in self.kube.rayjobs()
        }

    def details(self, host: str | None, submission: str) -> dict | None:
        return next((job for job in self._jobs(host) if job["submission_id"] == submission), None)

    def answer(self, method: str, host: str | None, path: str) -> Answer:
        """The head's answer to `method path`; `host`: the head a proxied request names."""
        if host is not None:
            host = host.lower()
            if host not in self._heads():
                # No Ray head answers at that address (its RayJob is gone, or never was).
                return _text(502, f"no Ray head at {host}")
        with self.lock:
            return self._answer(method, host, path)

    def _answer(self, method: str, host: str | None, path: str) -> Answer:
        if path == "/api/version":
            if method != "GET":
                return _text(405, "405: Method Not Allowed")
            return _json(
                200,
                {
                    "version": API_VERSION,
                    "ray_version": RAY_VERSION,
                    "ray_commit": "localcluster",
                    "session_name": "session_localcluster",
                },
            )
        if path == JOBS:
            if method != "GET":  # POST /api/jobs/ submits: KubeRay's submitter pod would
                return _text(405, "405: Method Not Allowed")
            return _json(200, self._jobs(host))
        if not path.startswith(JOBS):
            return _text(404, "404: Not Found")
        rest = unquote(path.removeprefix(JOBS))
        submission, _, action = rest.partition("/")
        if not submission or action not in ("", "stop"):
            return _text(404, "404: Not Found")
        if (method, action) not in (("GET", ""), ("DELETE", ""), ("POST", "stop")):
            return _text(405, "405: Method Not Allowed")
        job = self.details(host, submission)
        if job is None:
            return _text(404, f"Job {submission} does not exist")
        if method == "GET":
            return _json(200, job)
        if action == "stop":
            stopping = job["status"] not in TERMINAL
            if stopping:
                self.stopped[submission] = int(self.clock() * 1000)
            return _json(200, {"stopped": stopping})
        if job["status"] not in TERMINAL:
            # ray's JobManager.delete_job raises; the head answers with its traceback.
            return _text(
                500,
                f"RuntimeError: Attempted to delete job '{submission}', but it is in a "
                f"non-terminal state {job['status']}.",
            )
        self.deleted.add(submission)
        return _json(200, {"deleted": True})

    def follow_retries(self) -> list[str]:
        """End (exit 0) every running submitter pod of a Ray job that an earlier submitter
        pod ended: a retried `ray job submit` finds the job submitted, and `ray job logs
        --follow` of a terminal job returns at once. Returns the pods it ended."""
        ended = []
        for rayjob in self.kube.rayjobs():
            pods = submitter_pods(self.kube, rayjob)
            first = next(
                (i for i, pod in enumerate(pods) if _phase(pod) in ("Succeeded", "Failed")), None
            )
            if first is None:
                continue
            for pod in pods[first + 1 :]:
                meta = pod["metadata"]
                if _phase(pod) != "Running" or EXIT_CODE_ANNOTATION in (
                    meta.get("annotations") or {}
                ):
                    continue
                self.kube.annotate_pod(meta["namespace"], meta["name"], {EXIT_CODE_ANNOTATION: "0"})
                ended.append(meta["name"])
        return ended


def request_target(target: str) -> tuple[str | None, str]:
    """(host, path) of a request line's target: the absolute form a client sends its proxy
    (`http://head-svc.ns.svc.cluster.local:8265/api/jobs/x`) names the host; the origin form
    (`/api/jobs/x`) none. The query is dropped (the Jobs API reads none KubeRay sends)."""
    parts = urlsplit(target)
    if parts.scheme:
        if parts.scheme != "http" or not parts.netloc:
            raise ValueError(f"not an http URL: {target!r}")
        return parts.netloc, parts.path or "/"
    return None, parts.path or "/"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        try:
            host, path = request_target(self.path)
        except ValueError as exc:
            status, body, content_type = _text(400, str(exc))
        else:
            try:
                status, body, content_type = self.server.dashboard.answer(self.command, host, path)
            except Exception as exc:  # the API server's error: the head's 500
                status, body, content_type = _text(500, f"{type(exc).__name__}: {exc}")
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = _serve

    def do_CONNECT(self) -> None:  # an https URL through the proxy: no head serves TLS
        self.send_error(501, "CONNECT is not supported")


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, dashboard: Dashboard) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.dashboard = dashboard


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.ray_dashboard")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--follow-interval", type=float, default=1.0, help="seconds between follow_retries"
    )
    args = parser.parse_args(argv)
    dashboard = Dashboard(ApiKube.from_kubeconfig(args.kubeconfig))
    server = Server(args.port, dashboard)

    def follow() -> None:
        while True:
            try:
                for name in dashboard.follow_retries():
                    print(f"ray_dashboard: retried submitter {name} follows a terminal job: exit 0")
            except Exception as exc:  # the API server restarting: try again
                print(f"ray_dashboard: follow_retries: {exc}", file=sys.stderr)
            time.sleep(args.follow_interval)

    threading.Thread(target=follow, daemon=True).start()
    print(f"ray_dashboard: serving Ray's Jobs API on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
