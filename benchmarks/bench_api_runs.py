"""`GET /v1/runs` when runs have trained a long time: 200 runs, each with a 50 MB
metrics.jsonl (about 330,000 lines), polled by 10 clients for 60 s.

`trainstack serve` runs as its own process on 127.0.0.1 against the Kubernetes REST API test
double (tests/k8s), as in bench_api.py. The 200 PyTorchJobs are put straight into the test
double (a clone of one submitted run each, with its own run dir); each run dir's
`logs/metrics.jsonl` is a hard link to one real 50 MB file of trainer-shaped lines, so every
run holds a faithful 50 MB file while the disk holds one (reads come from the page cache, as
on a warm FSx client: S3 would only add transfer time). Figures: the first `/v1/runs` (the
snapshot's first refresh, in line), then p50/p99 of `/v1/runs` under the pollers, and how
many LISTs the API server saw. BENCH_API_RUNS_SERVER_PATH runs the server from another
source tree (the figures before a change); BENCH_API_RUNS_SECONDS, _RUNS and _MB scale it.
Target: p99 <= 3 x the `/healthz` p99 of the same pollers on the same server (the box's own
floor, as in bench_api.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_api import TOKEN, _free_port, _percentile, _wait_healthy, stop

RUNS = int(os.environ.get("BENCH_API_RUNS_RUNS", "200"))
FILE_MB = float(os.environ.get("BENCH_API_RUNS_MB", "50"))
SECONDS = float(os.environ.get("BENCH_API_RUNS_SECONDS", "60"))
POLLERS = 10
SERVER_PATH = os.environ.get("BENCH_API_RUNS_SERVER_PATH")


def write_metrics(path: Path, megabytes: float) -> int:
    """Trainer-shaped lines (an eval line every 100 steps) up to `megabytes`; lines written."""
    target = int(megabytes * 1_000_000)
    written, step, lines = 0, 0, []
    with path.open("w") as fh:
        while written < target:
            step += 1
            record = {
                "step": step,
                "loss": round(4.0 / (1 + step / 1000), 6),
                "tokens_seen": 4096 * step,
                "throughput/tokens_per_s": 91234.5,
                "mfu/percent": 41.25,
                "memory/max_allocated_gib": 61.5,
                "memory/max_reserved_gib": 70.0,
                "memory/max_rss_gib": 12.25,
            }
            lines.append(json.dumps(record) + "\n")
            if step % 100 == 0:
                lines.append(json.dumps({"step": step, "eval_loss": 4.1 / (1 + step / 1000)}))
                lines.append("\n")
            if len(lines) >= 2000:
                chunk = "".join(lines)
                fh.write(chunk)
                written += len(chunk)
                lines = []
        fh.write("".join(lines))
    return step


def seed_runs(apiserver, namespace: str, template: dict, runs_root: Path, metrics: Path) -> None:
    """RUNS PyTorchJobs like `template`, each with a run dir holding `metrics` (a link)."""
    import copy

    from jobs.backends.kubernetes.run_status import RUN_DIR_ANNOTATION

    for index in range(RUNS):
        name = f"long-{index:03d}"
        run_dir = runs_root / name
        (run_dir / "logs").mkdir(parents=True)
        os.link(metrics, run_dir / "logs" / "metrics.jsonl")
        (run_dir / "config.yaml").write_text("trainer:\n  max_steps: 1000000\n")
        job = copy.deepcopy(template)
        meta = job["metadata"]
        meta["name"] = name
        meta["annotations"][RUN_DIR_ANNOTATION] = str(run_dir)
        for key in ("uid", "resourceVersion", "creationTimestamp", "ownerReferences"):
            meta.pop(key, None)
        apiserver.put("pytorchjobs", job, namespace)


async def _poll(url: str, path: str, seconds: float, headers: dict) -> list[float]:
    import httpx

    latencies: list[float] = []
    limits = httpx.Limits(max_connections=POLLERS + 2)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as c:
        stop = time.monotonic() + seconds

        async def poll() -> None:
            while time.monotonic() < stop:
                started = time.perf_counter()
                response = await c.get(path)
                if response.status_code != 200:
                    raise RuntimeError(f"GET {path}: {response.status_code} {response.text}")
                latencies.append(1000 * (time.perf_counter() - started))

        await asyncio.gather(*(poll() for _ in range(POLLERS)))
    return latencies


def run() -> dict:
    import httpx

    from jobs.api.auth import token_hash
    from testing_support.k8s.cluster import NAMESPACE, seed_cluster
    from testing_support.k8s.fake_apiserver import FakeKubeApiServer
    from testing_support.k8s.fake_operator import FakeOperator, JobPlan

    apiserver = FakeKubeApiServer().start()
    FakeOperator(apiserver, JobPlan(hold=True))
    seed_cluster(apiserver)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_API_RUNS_TMP")) as tmp:
        tmp_path = Path(tmp)
        kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
        hashes = tmp_path / "token-hashes"
        hashes.mkdir()
        (hashes / "bench").write_text(token_hash(TOKEN))
        metrics = tmp_path / "metrics.jsonl"
        steps = write_metrics(metrics, FILE_MB)
        port = _free_port()
        command = [sys.executable, "-m", "jobs.cli", "serve", "--port", str(port)]
        command += ["--token-hashes", str(hashes), f"cluster.kubeconfig={kubeconfig}"]
        env = dict(os.environ)
        if SERVER_PATH:
            env["PYTHONPATH"] = SERVER_PATH
        log = (tmp_path / "serve.log").open("w")
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env)
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            _wait_healthy(url, server)
            seed = {"run_id": "seed", "compute": "p4d.24xlarge"}
            seed |= {"image": "registry.example.com/t:v1", "storage_root": str(tmp_path / "runs")}
            response = httpx.post(f"{url}/v1/runs", json=seed, headers=headers, timeout=120)
            if response.status_code != 201:
                raise RuntimeError(f"seed submit failed: {response.status_code} {response.text}")
            template = apiserver.get("pytorchjobs", "seed", NAMESPACE)
            seed_runs(apiserver, NAMESPACE, template, tmp_path / "runs", metrics)
            time.sleep(2)  # past the snapshot's ttl: the next read refreshes it
            started = time.perf_counter()
            first = httpx.get(f"{url}/v1/runs", headers=headers, timeout=600)
            first_ms = 1000 * (time.perf_counter() - started)
            listed = first.json()["runs"]
            read = [r for r in listed if r["run_id"].startswith("long-")]
            if len(read) != RUNS or {r["last_step"] for r in read} != {steps}:
                raise RuntimeError(f"unexpected runs: {len(read)}, {read[:1]}")
            floor = asyncio.run(_poll(url, "/healthz", SECONDS / 4, {}))
            lists_before = apiserver.count("GET", "/pytorchjobs?")
            started = time.monotonic()
            latencies = asyncio.run(_poll(url, "/v1/runs", SECONDS, headers))
            elapsed = time.monotonic() - started
            lists = apiserver.count("GET", "/pytorchjobs?") - lists_before
        finally:
            stop(server, log, apiserver)
    p99, floor_p99 = _percentile(latencies, 0.99), _percentile(floor, 0.99)
    figures = {
        "runs": RUNS,
        "metrics_mb_per_run": FILE_MB,
        "metrics_lines_per_run": steps + steps // 100,
        "server_source": SERVER_PATH or "this tree",
        "seconds": round(elapsed, 1),
        "pollers": POLLERS,
        "first_list_ms": round(first_ms, 1),
        "requests": len(latencies),
        "runs_p50_ms": round(_percentile(latencies, 0.5), 1),
        "runs_p99_ms": round(p99, 1),
        "healthz_floor_p50_ms": round(_percentile(floor, 0.5), 1),
        "healthz_floor_p99_ms": round(floor_p99, 1),
        "cluster_lists_per_s": round(lists / elapsed, 2),
    }
    figures["checks"] = {
        "runs p99 over the /healthz floor": {
            "value": round(p99 / floor_p99, 2),
            "target": "<= 3",
            "ok": p99 <= 3 * floor_p99,
        },
    }
    return figures
