"""The Training API under load: 50 clients polling status and 10 submitting, for 60 s.

`trainstack serve` runs as its own process (uvicorn, as in the cluster) on 127.0.0.1 against
the Kubernetes REST API test double (tests/k8s) and its simulated operator; the load comes
from asyncio clients in this process. Figures: status latency p50/p99 (GET /v1/runs/{id} and
GET /v1/runs, mixed), submit latency p50/p99 (POST /v1/runs: compose, validate, materialize,
preflight, submit; submits queue behind one another, Hydra composes one at a time), the same
two for one client alone (`alone_*`: 10 submits, 5 status reads after each), errors, and how
many LISTs of PyTorchJobs the API server saw per second (one snapshot shared by all clients).
BENCH_API_SECONDS shortens the run.
Absolute latency here is the machine's (a shared 2-core box where a bare FastAPI hello-world
answers 50 clients at p50 ~1 s), so the status target is relative: first the same 50 pollers
hit `/healthz` of the same server (no work, no auth) for a quarter of the time, and status
p50 must stay within 3x that floor. Targets: no errors; <= 1.5 LISTs per second; status p50
<= 3 x the /healthz p50.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLLERS = 50
SUBMITTERS = int(os.environ.get("BENCH_API_SUBMITTERS", "10"))
SECONDS = float(os.environ.get("BENCH_API_SECONDS", "60"))
TOKEN = "bench-token-0123456789"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _floor(url: str, seconds: float) -> list[float]:
    """Latency of /healthz under the same number of pollers: what the box and FastAPI cost."""
    import httpx

    latencies: list[float] = []
    limits = httpx.Limits(max_connections=POLLERS + 5)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        stop = time.monotonic() + seconds

        async def poll() -> None:
            while time.monotonic() < stop:
                started = time.perf_counter()
                await client.get("/healthz")
                latencies.append(1000 * (time.perf_counter() - started))

        await asyncio.gather(*(poll() for _ in range(POLLERS)))
    return latencies


async def _alone(url: str, runs_root: Path, runs: int = 10) -> dict:
    """One client, one request at a time: the cost of a status read and a submit by itself."""
    import httpx

    status_ms, submit_ms = [], []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        for index in range(runs):
            body = {
                "run_id": f"alone-{index}",
                "compute": "p4d.24xlarge",
                "image": "registry.example.com/t:v1",
                "storage_root": str(runs_root),
            }
            started = time.perf_counter()
            response = await client.post("/v1/runs", json=body)
            submit_ms.append(1000 * (time.perf_counter() - started))
            if response.status_code != 201:
                raise RuntimeError(f"submit failed: {response.status_code} {response.text}")
            for _ in range(5):
                started = time.perf_counter()
                await client.get(f"/v1/runs/alone-{index}")
                status_ms.append(1000 * (time.perf_counter() - started))
    return {"status_ms": status_ms, "submit_ms": submit_ms}


async def _load(url: str, seconds: float, runs_root: Path) -> dict:
    import httpx

    status_ms: list[float] = []
    submit_ms: list[float] = []
    errors: list[str] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=POLLERS + SUBMITTERS + 5)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as c:
        # One run exists before the clock starts, so pollers have something to read.
        seed = {"run_id": "seed", "compute": "p4d.24xlarge", "image": "registry.example.com/t:v1"}
        seed["storage_root"] = str(runs_root)
        response = await c.post("/v1/runs", json=seed)
        if response.status_code != 201:
            raise RuntimeError(f"seed submit failed: {response.status_code} {response.text}")
        stop = time.monotonic() + seconds

        async def poll(index: int) -> None:
            paths = ("/v1/runs/seed", "/v1/runs")
            n = 0
            while time.monotonic() < stop:
                started = time.perf_counter()
                try:
                    response = await c.get(paths[(index + n) % 2])
                except httpx.HTTPError as err:
                    errors.append(f"GET {type(err).__name__}: {err}")
                    continue
                finally:
                    n += 1
                status_ms.append(1000 * (time.perf_counter() - started))
                if response.status_code != 200:
                    errors.append(f"GET {response.status_code}")

        async def submit(index: int) -> None:
            n = 0
            while time.monotonic() < stop:
                body = {**seed, "run_id": f"load-{index}-{n}"}
                started = time.perf_counter()
                n += 1
                try:
                    response = await c.post("/v1/runs", json=body)
                except httpx.HTTPError as err:
                    errors.append(f"POST {type(err).__name__}: {err}")
                    continue
                submit_ms.append(1000 * (time.perf_counter() - started))
                if response.status_code != 201:
                    errors.append(f"POST {response.status_code} {response.text[:120]}")

        await asyncio.gather(
            *(poll(i) for i in range(POLLERS)), *(submit(i) for i in range(SUBMITTERS))
        )
    return {"status_ms": status_ms, "submit_ms": submit_ms, "errors": errors}


def run() -> dict:
    from jobs.api.auth import token_hash
    from testing_support.k8s.cluster import seed_cluster
    from testing_support.k8s.fake_apiserver import FakeKubeApiServer
    from testing_support.k8s.fake_operator import FakeOperator, JobPlan

    apiserver = FakeKubeApiServer().start()
    FakeOperator(apiserver, JobPlan())
    seed_cluster(apiserver)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
        hashes = tmp_path / "token-hashes"
        hashes.mkdir()
        (hashes / "bench").write_text(token_hash(TOKEN))
        port = _free_port()
        command = [
            sys.executable,
            "-m",
            "jobs.cli",
            "serve",
            "--port",
            str(port),
            "--token-hashes",
            str(hashes),
            f"cluster.kubeconfig={kubeconfig}",
            "cluster.approved_images=[registry.example.com]",  # the benchmark's images
        ]
        log = (tmp_path / "serve.log").open("w")
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, server)
            alone = asyncio.run(_alone(url, tmp_path / "runs"))
            floor = asyncio.run(_floor(url, SECONDS / 4))
            lists_before = apiserver.count("GET", "/pytorchjobs?")
            started = time.monotonic()
            load = asyncio.run(_load(url, SECONDS, tmp_path / "runs"))
            elapsed = time.monotonic() - started
            lists = apiserver.count("GET", "/pytorchjobs?") - lists_before
        finally:
            stop(server, log, apiserver)
    status, submits = load["status_ms"], load["submit_ms"]
    lists_per_s = lists / elapsed
    p50, floor_p50 = _percentile(status, 0.5), _percentile(floor, 0.5)
    figures = {
        "seconds": round(elapsed, 1),
        "pollers": POLLERS,
        "submitters": SUBMITTERS,
        "alone_status_p50_ms": round(_percentile(alone["status_ms"], 0.5), 1),
        "alone_status_p99_ms": round(_percentile(alone["status_ms"], 0.99), 1),
        "alone_submit_p50_ms": round(_percentile(alone["submit_ms"], 0.5), 1),
        "status_requests": len(status),
        "status_p50_ms": round(p50, 1),
        "status_p99_ms": round(_percentile(status, 0.99), 1),
        "healthz_floor_p50_ms": round(floor_p50, 1),
        "healthz_floor_p99_ms": round(_percentile(floor, 0.99), 1),
        "submits": len(submits),
        "submit_p50_ms": round(_percentile(submits, 0.5), 1) if submits else None,
        "submit_p99_ms": round(_percentile(submits, 0.99), 1) if submits else None,
        "errors": len(load["errors"]),
        "first_errors": load["errors"][:5],
        "cluster_lists": lists,
        "cluster_lists_per_s": round(lists_per_s, 2),
    }
    figures["checks"] = {
        "no errors": {"value": len(load["errors"]), "target": 0, "ok": not load["errors"]},
        "LISTs per second": {
            "value": figures["cluster_lists_per_s"],
            "target": "<= 1.5",
            "ok": lists_per_s <= 1.5,
        },
        "status p50 over the /healthz floor": {
            "value": round(p50 / floor_p50, 2),
            "target": "<= 3",
            "ok": p50 <= 3 * floor_p50,
        },
    }
    return figures


def stop(server: subprocess.Popen, log, apiserver) -> None:
    """End `trainstack serve` (killed if it does not exit in 30 s), its log, the test double."""
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    log.close()
    apiserver.operator.shutdown()
    apiserver.stop()


def _wait_healthy(url: str, server: subprocess.Popen) -> None:
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"trainstack serve exited with {server.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("trainstack serve did not become healthy in 120 s")
