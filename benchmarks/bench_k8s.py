"""Cluster client overhead: submit, status and watch latency through the real Kubernetes client.

Runs against the Kubernetes REST API test double on 127.0.0.1 (tests/k8s), so the figures are
trainstack's and the client's own cost per call (HTTP round trips on loopback, (de)serialization,
retry wrapper), not a real apiserver's. Targets: submitting a run (ConfigMap, job, owner patch)
p50 <= 25 ms; `status` p50 <= 10 ms; a state change reaches the watcher p50 <= 50 ms.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path

RUNS = 20


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run() -> dict:
    from jobs.backends.kubernetes.client.api import connect
    from jobs.backends.kubernetes.client.submit import submit
    from jobs.backends.kubernetes.client.watch import wait_for_end
    from jobs.backends.kubernetes.run_status import to_status
    from testing_support.k8s.cluster import NAMESPACE, config_map, pytorch_job, seed_cluster
    from testing_support.k8s.fake_apiserver import FakeKubeApiServer
    from testing_support.k8s.fake_operator import FakeOperator, JobPlan

    server = FakeKubeApiServer().start()
    operator = FakeOperator(server, JobPlan(hold=True, step_seconds=0.5))
    seed_cluster(server)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
            cluster = connect(str(kubeconfig), None, NAMESPACE)
            submit_ms, status_ms, watch_ms = [], [], []
            for index in range(RUNS):
                name = f"bench-{index}"
                started = time.perf_counter()
                submit(cluster, [config_map(name), pytorch_job(name)])
                submit_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                to_status(cluster.get_job(name))
                status_ms.append((time.perf_counter() - started) * 1000)
            operator.shutdown()
            for index in range(RUNS):
                watch_ms.append(_watch_latency_ms(server, cluster, f"bench-{index}", wait_for_end))
    finally:
        server.stop()
    figures = {
        "runs": RUNS,
        "submit_ms_p50": round(statistics.median(submit_ms), 1),
        "submit_ms_p90": round(_percentile(submit_ms, 0.9), 1),
        "status_ms_p50": round(statistics.median(status_ms), 1),
        "watch_latency_ms_p50": round(statistics.median(watch_ms), 1),
        "watch_latency_ms_p90": round(_percentile(watch_ms, 0.9), 1),
    }
    targets = {"submit_ms_p50": 25, "status_ms_p50": 10, "watch_latency_ms_p50": 50}
    figures["checks"] = {
        name: {"value": figures[name], "target": f"<= {limit}", "ok": figures[name] <= limit}
        for name, limit in targets.items()
    }
    return figures


def _watch_latency_ms(server, cluster, name: str, wait_for_end) -> float:
    """Time from the store recording Succeeded to the watcher's callback seeing it."""
    seen: dict[str, float] = {}
    connected = threading.Event()

    def on_state(state: str, _: dict) -> None:
        seen[state] = time.perf_counter()
        connected.set()

    watcher = threading.Thread(target=wait_for_end, args=(cluster, name, on_state), daemon=True)
    watcher.start()
    connected.wait(5)
    time.sleep(0.05)  # let the watch request reach the server

    def succeed(job: dict) -> None:
        job.setdefault("status", {})["conditions"] = [{"type": "Succeeded", "status": "True"}]

    changed = time.perf_counter()
    server.update("pytorchjobs", name, "training", succeed)
    watcher.join(5)
    return (seen["Succeeded"] - changed) * 1000
