"""The Ray dashboard stand-in (localcluster/ray_dashboard.py) answers KubeRay's operator as
Ray 2.60's Jobs REST API does: every job body is exactly a `JobDetails` of the real `ray`
package (its JSON, key for key), in each state a submitter pod puts the job in; 404 for a job
not submitted, stop and delete as the head answers them; proxied requests (the absolute URL in
the request line, as Go's transport sends them through HTTP_PROXY) pick the head they name.
Driven by recorded listings (testing_support/kube_listing.py): no cluster."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request

import pytest

from localcluster.ray_dashboard import Dashboard, Server, request_target
from testing_support.kube_listing import (
    RecordedKube,
    ray_node_pod,
    raycluster,
    rayjob,
    submitter_job,
    submitter_pod,
)

pydantic_models = pytest.importorskip("ray.dashboard.modules.job.pydantic_models")
JobDetails = pydantic_models.JobDetails

STARTED_MS = 1767225662000
"""2026-01-01T00:01:02Z, the first submitter pod's start."""
FINISHED_MS = 1767225900000
"""2026-01-01T00:05:00Z, when kwok ended it."""


def checked(body: str) -> dict:
    """`body` validated by Ray's own model (strictly, from JSON) and identical to what the
    head serves for it (`JobDetails.dict()`): no key missing, none extra, no type coerced."""
    details = JobDetails.model_validate_json(body, strict=True)
    answer = json.loads(body)
    assert details.model_dump(mode="json") == answer
    return answer


def cluster(*phases: tuple[str, int | None], run_id: str = "run-1", **job_kw) -> tuple:
    """A RayJob, its Ray cluster's head and worker pods, and its submitter pods (oldest first)
    in `phases` ((phase, exit code) each)."""
    owner = rayjob("job-a", run_id, **job_kw)
    ray_cluster = raycluster(owner)
    job = submitter_job(owner)
    objects = [
        owner,
        ray_cluster,
        job,
        ray_node_pod(ray_cluster, "head", 0, run_id),
        ray_node_pod(ray_cluster, "worker", 0, run_id),
    ]
    for index, (phase, code) in enumerate(phases):
        objects.append(
            submitter_pod(
                job,
                f"p{index}",
                phase,
                run_id,
                created=f"2026-01-01T00:0{index + 1}:00Z",
                started=f"2026-01-01T00:0{index + 1}:02Z",
                exit_code=code,
            )
        )
    return owner, RecordedKube(objects)


def get(dashboard: Dashboard, owner: dict, path: str = "", method: str = "GET"):
    host = owner["status"]["dashboardURL"]
    return dashboard.answer(method, host, f"/api/jobs/{owner['status']['jobId']}{path}")


def test_a_job_not_submitted_yet_is_not_found():
    """No submitter pod: `ray job submit` has not run, the head knows no such job (KubeRay
    reads the 404 as not found, dashboard_httpclient.go GetJobInfo)."""
    owner, kube = cluster()
    status, body, _ = get(Dashboard(kube), owner)
    assert (status, body) == (404, f"Job {owner['status']['jobId']} does not exist")
    assert Dashboard(kube).answer("GET", None, "/api/jobs/no-such-job")[0] == 404


def test_pending_then_running():
    owner, kube = cluster(("Pending", None), runtime_env_yaml="env_vars:\n  A: b\n")
    status, body, content_type = get(Dashboard(kube), owner)
    job = checked(body)
    assert (status, content_type) == (200, "application/json")
    assert job["status"] == "PENDING"
    assert job["message"] == (
        "Job has not started yet. It may be waiting for the runtime environment to be set up."
    )
    assert job["runtime_env"] == {"env_vars": {"A": "b"}}
    assert job["submission_id"] == owner["status"]["jobId"]
    assert job["type"] == "SUBMISSION"
    assert job["end_time"] is None and job["driver_node_id"] is None

    owner, kube = cluster(("Running", None))
    job = checked(get(Dashboard(kube), owner)[1])
    assert job["status"] == "RUNNING"
    assert job["message"] == "Job is currently running."
    assert job["start_time"] == STARTED_MS
    assert job["end_time"] is None and job["driver_exit_code"] is None
    assert job["entrypoint"] == "python -m trainer.train"
    assert job["driver_agent_http_address"] == "http://10.244.0.7:52365"
    assert len(job["driver_node_id"]) == 56


def test_succeeded():
    owner, kube = cluster(("Succeeded", 0))
    job = checked(get(Dashboard(kube), owner)[1])
    assert job["status"] == "SUCCEEDED"
    assert job["message"] == "Job finished successfully."
    assert (job["start_time"], job["end_time"]) == (STARTED_MS, FINISHED_MS)
    assert job["driver_exit_code"] == 0 and job["error_type"] is None


def test_failed_says_the_exit_code():
    owner, kube = cluster(("Failed", 137))
    job = checked(get(Dashboard(kube), owner)[1])
    assert job["status"] == "FAILED"
    assert "exit code 137" in job["message"]
    assert job["error_type"] == "JOB_ENTRYPOINT_COMMAND_ERROR"
    assert (job["driver_exit_code"], job["end_time"]) == (137, FINISHED_MS)


def test_the_first_submitter_to_end_decides_for_good():
    """A Ray job never leaves a terminal state: a retried submitter pod (the Job's
    backoffLimit) running after a failed one does not make it RUNNING again, and the stand-in
    ends that retry with exit 0 (`ray job logs --follow` of a terminal job returns)."""
    owner, kube = cluster(("Failed", 1), ("Running", None))
    dashboard = Dashboard(kube)
    assert checked(get(dashboard, owner)[1])["status"] == "FAILED"
    assert dashboard.follow_retries() == ["job-a-p1"]
    assert kube.annotated == [
        ("training", "job-a-p1", {"localcluster.trainstack.io/exit-code": "0"})
    ]
    assert dashboard.follow_retries() == []  # annotated once

    owner, kube = cluster(("Running", None))
    assert Dashboard(kube).follow_retries() == []  # a running job's submitter is left alone
    assert kube.annotated == []


def test_stop_a_running_job_then_it_is_stopped():
    owner, kube = cluster(("Running", None))
    dashboard = Dashboard(kube, clock=lambda: 1767226000.5)
    status, body, _ = get(dashboard, owner, "/stop", "POST")
    assert (status, json.loads(body)) == (200, {"stopped": True})
    job = checked(get(dashboard, owner)[1])
    assert job["status"] == "STOPPED"
    assert job["message"] == "Job was intentionally stopped."
    assert job["end_time"] == 1767226000500
    # Stopped is terminal: stopping again stops nothing (KubeRay's StopJob then reads the job).
    assert json.loads(get(dashboard, owner, "/stop", "POST")[1]) == {"stopped": False}

    owner, kube = cluster(("Succeeded", 0))
    assert json.loads(get(Dashboard(kube), owner, "/stop", "POST")[1]) == {"stopped": False}


def test_delete_only_a_terminal_job():
    owner, kube = cluster(("Running", None))
    dashboard = Dashboard(kube)
    status, body, _ = get(dashboard, owner, method="DELETE")
    assert status == 500 and "non-terminal state RUNNING" in body
    assert get(dashboard, owner)[0] == 200  # still there

    owner, kube = cluster(("Succeeded", 0))
    dashboard = Dashboard(kube)
    status, body, _ = get(dashboard, owner, method="DELETE")
    assert (status, json.loads(body)) == (200, {"deleted": True})
    assert get(dashboard, owner)[0] == 404
    assert json.loads(dashboard.answer("GET", None, "/api/jobs/")[1]) == []


def test_list_and_version():
    owner, kube = cluster(("Running", None))
    other = rayjob("job-b", "run-2")
    job_b = submitter_job(other)
    kube.objects += [other, job_b, submitter_pod(job_b, "p0", "Succeeded", "run-2", exit_code=0)]
    dashboard = Dashboard(kube)
    every = json.loads(dashboard.answer("GET", None, "/api/jobs/")[1])
    assert sorted(job["status"] for job in every) == ["RUNNING", "SUCCEEDED"]
    for job in every:
        checked(json.dumps(job))
    # Through the proxy each head lists its own jobs only.
    mine = json.loads(dashboard.answer("GET", owner["status"]["dashboardURL"], "/api/jobs/")[1])
    assert [job["submission_id"] for job in mine] == [owner["status"]["jobId"]]
    version = json.loads(dashboard.answer("GET", None, "/api/version")[1])
    assert version["version"] == "4" and version["ray_version"].startswith("2.60")


def test_a_head_answers_only_for_its_own_jobs():
    owner, kube = cluster(("Running", None))
    other = rayjob("job-b", "run-2")
    kube.objects.append(other)
    dashboard = Dashboard(kube)
    path = f"/api/jobs/{owner['status']['jobId']}"
    assert dashboard.answer("GET", other["status"]["dashboardURL"], path)[0] == 404
    assert dashboard.answer("GET", "nowhere.training.svc.cluster.local:8265", path)[0] == 502


def test_request_targets():
    assert request_target("http://h-head-svc.ns.svc.cluster.local:8265/api/jobs/x") == (
        "h-head-svc.ns.svc.cluster.local:8265",
        "/api/jobs/x",
    )
    assert request_target("/api/jobs/x?y=1") == (None, "/api/jobs/x")
    with pytest.raises(ValueError):
        request_target("https://h:8265/api/jobs/x")


@pytest.fixture
def server():
    owner, kube = cluster(("Running", None))
    served = Server(0, Dashboard(kube))
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield owner, served.server_address[1]
    served.shutdown()
    served.server_close()


def test_a_proxied_request_line(server):
    """What Go's transport sends its HTTP_PROXY for KubeRay's GetJobInfo: the absolute URL
    in the request line, the head's host in Host."""
    owner, port = server
    host = owner["status"]["dashboardURL"]
    request = (
        f"GET http://{host}/api/jobs/{owner['status']['jobId']} HTTP/1.1\r\n"
        f"Host: {host}\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(
            next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(
                b":"
            )[1]
        )
        while len(body) < length:
            body += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200")
    assert checked(body.decode())["status"] == "RUNNING"


def test_a_client_through_the_proxy(server):
    """Any client with the stand-in as its HTTP proxy (urllib here, Go's in the operator)."""
    owner, port = server
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"})
    )
    url = f"http://{owner['status']['dashboardURL']}/api/jobs/{owner['status']['jobId']}"
    with opener.open(url, timeout=5) as response:
        assert checked(response.read().decode())["status"] == "RUNNING"
    stop = urllib.request.Request(url + "/stop", method="POST", data=b"")
    with opener.open(stop, timeout=5) as response:
        assert json.loads(response.read()) == {"stopped": True}
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(url.replace("job-a-x7k2p", "gone"), timeout=5)
    assert refused.value.code == 502
