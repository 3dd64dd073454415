"""Issue 47, scenario 4 on the REAL control plane: bench_api_load's 50 users x 10 runs (submit,
list after each, follow one log, one submission sent twice, one refused:
testing_support/api_load.py) against `trainstack serve` started with the stack's deployed
arguments as its own ServiceAccount (testing_support/deployed_api.py), on a local cluster this
benchmark starts in a temporary folder and stops after (testing_support/local_control_plane.py,
as the e2e suite does; the components must be built: `make cluster-up` once). Run it alone:
it takes the machine for minutes (`flock /work/e2e.lock python -m benchmarks api_load_localcluster`
where others share the machine).

The local stack's quota is 2 nodes, so of 500 one-node TrainJobs 2 are admitted and the rest
wait in Kueue's queue: the figures say how many were admitted and how many queued. The judge is
what the API server holds afterwards: no 5xx, no run id accepted twice, every accepted run there
exactly once with one Workload, no refused run there; the service and every component of the
cluster still the process it was. Then every job of the load is deleted and waited for (its
pods and Workloads gone: `cleanup_s`) before the cluster stops.
BENCH_API_LOAD_LOCALCLUSTER_USERS / _RUNS shrink it.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from localcluster import cluster as localcluster
from testing_support.api_load import figures, run_load
from testing_support.deployed_api import api_account_kubeconfig, deployed_process
from testing_support.local_control_plane import (
    JOBS,
    KUEUE_API,
    conditions,
    remove_jobs,
    running_cluster,
)
from testing_support.s3_server import MotoS3

USERS = int(os.environ.get("BENCH_API_LOAD_LOCALCLUSTER_USERS", "50"))
RUNS = int(os.environ.get("BENCH_API_LOAD_LOCALCLUSTER_RUNS", "10"))
WORKLOADS_TIMEOUT_S = 300.0
"""How long Kueue gets to make a Workload for every accepted run before the count is taken."""


def run() -> dict:
    api_version, kind = JOBS["trainjob"]  # the local stack's operator kind
    tokens = {f"load{i:02d}": f"ts-bench-load-{i:02d}-0123456789abcdef" for i in range(USERS)}

    def request(user: str, run_id: str) -> dict:
        return {"run_id": run_id, "compute": "p5.48xlarge", "nodes": 1}

    def load_jobs(plane) -> list[str]:
        names = [j["metadata"]["name"] for j in plane.items(api_version, kind)]
        return [n for n in names if n.split("-")[0] in tokens]

    def workloads_by_job(plane) -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for workload in plane.items(KUEUE_API, "Workload"):
            for owner in workload["metadata"].get("ownerReferences") or []:
                if owner.get("kind") == kind:
                    found.setdefault(owner["name"], []).append(workload)
        return found

    moto = MotoS3().start()
    try:
        with tempfile.TemporaryDirectory() as tmp, running_cluster(Path(tmp), moto) as plane:
            account = api_account_kubeconfig(plane, Path(tmp) / "api-kubeconfig")
            home = Path(tmp) / "serve"
            home.mkdir()
            api = deployed_process(plane, account, moto, home, tokens)
            try:
                api.start(timeout_s=120)
                result = asyncio.run(run_load(api.url, tokens, RUNS, request, verify=api.verify))
                api_exit = api.proc.poll() if api.proc else None
                on_cluster = load_jobs(plane)
                started = time.monotonic()
                deadline = started + WORKLOADS_TIMEOUT_S
                while True:
                    workloads = workloads_by_job(plane)
                    if set(on_cluster) <= set(workloads) or time.monotonic() > deadline:
                        break
                    time.sleep(2)
                workloads_s = time.monotonic() - started
                dead = [n for n in plane.state.pids if not localcluster._alive(plane.state, n)]
                tracebacks = api.log().count("Traceback")
            finally:
                api.stop()
                cleanup_started = time.monotonic()
                remove_jobs(plane, api_version, kind, set(load_jobs(plane)), timeout=600)
                cleanup_s = time.monotonic() - cleanup_started
    finally:
        moto.stop()

    admitted = [
        name
        for name in on_cluster
        if any(
            conditions(w).get("Admitted", {}).get("status") == "True"
            for w in workloads.get(name, [])
        )
    ]
    problems = result.problems(on_cluster)
    no_workload = sorted(set(on_cluster) - set(workloads))
    if no_workload:
        problems.append(f"no Workload after {WORKLOADS_TIMEOUT_S:.0f}s: {no_workload[:5]}")
    twice = sorted(n for n in on_cluster if len(workloads.get(n, [])) > 1)
    if twice:
        problems.append(f"more than one Workload: {twice[:5]}")
    if api_exit is not None:
        problems.append(f"trainstack serve exited {api_exit} during the load")
    if dead:
        problems.append(f"components no longer running after the load: {dead}")
    found = {
        "users": USERS,
        "runs_per_user": RUNS,
        "cluster": "localcluster (real kube-apiserver, etcd, Kueue, Trainer, JobSet; kwok nodes)",
        **figures(result),
        "by_status": dict(Counter(f"{o.kind} {o.status}" for o in result.outcomes)),
        "on_cluster": len(on_cluster),
        "admitted": len(admitted),
        "queued": len(on_cluster) - len(admitted),
        "workloads_made_s": round(workloads_s, 1),
        "cleanup_s": round(cleanup_s, 1),
        "serve_tracebacks": tracebacks,
        "problems": problems,
    }
    found["checks"] = {
        "no 5xx": {
            "value": found["server_errors"],
            "target": 0,
            "ok": found["server_errors"] == 0,
        },
        "nothing lost, duplicated or left behind": {
            "value": len(problems),
            "target": 0,
            "ok": not problems,
        },
    }
    return found
