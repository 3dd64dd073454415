"""Issue 47, scenario 4 against the real control plane: 50 users at once on `trainstack serve`
started with the stack's deployed arguments as its own ServiceAccount (test_e2e_serve.py
`deployed_api`), each submitting runs, listing after each, following one run's log, sending
one submission twice and one the service refuses (testing_support/api_load.py).

What the API server holds afterwards is the judge: no 5xx, no run twice, every accepted run
there exactly once, no refused run there. Each user submits E2E_LOAD_RUNS runs (default 1, so
the tier stays short); benchmarks/bench_api_load.py runs the full 50 x 10 for the figures.
"""

from __future__ import annotations

import asyncio
import os

from testing_support.api_load import figures, run_load
from tests.e2e.conftest import JOBS, KUEUE_API, RUN_ID_LABEL, eventually
from tests.e2e.test_e2e_serve import api_account, deployed_api

USERS = 50
RUNS = int(os.environ.get("E2E_LOAD_RUNS", "1"))
KIND = JOBS["trainjob"]  # the local stack's operator kind
__all__ = ["api_account"]


def test_fifty_users_at_once_lose_nothing_and_duplicate_nothing(
    local_cluster, api_account, moto_s3, tmp_path
):
    tokens = {f"load{i:02d}": f"ts-e2e-load-{i:02d}-0123456789abcdef" for i in range(USERS)}

    def request(user: str, run_id: str) -> dict:
        return {"run_id": run_id, "compute": "p5.48xlarge", "nodes": 1}

    with deployed_api(local_cluster, api_account, moto_s3, tmp_path, tokens) as (url, ca):
        try:
            result = asyncio.run(run_load(url, tokens, RUNS, request, verify=str(ca)))
            jobs = local_cluster.items(*KIND)
            on_cluster = [
                j["metadata"]["name"] for j in jobs if j["metadata"]["name"][:4] == "load"
            ]
            assert result.problems(on_cluster) == []
            assert len(result.accepted) == USERS * RUNS
            print(f"\n[scenario 4] {figures(result)}")
        finally:
            remove_all(local_cluster, tokens)


def remove_all(cluster, tokens: dict[str, str]) -> None:
    """Every job of the load's users, deleted at once; then wait for their pods to go."""
    api_version, kind = KIND
    mine = [
        j for j in cluster.items(api_version, kind) if j["metadata"]["name"].split("-")[0] in tokens
    ]
    for job in mine:
        cluster.resource(api_version, kind).delete(
            name=job["metadata"]["name"],
            namespace="training",
            body={"propagationPolicy": "Background"},
        )
    names = {j["metadata"]["name"] for j in mine}
    eventually(
        lambda: (
            not [
                p
                for p in cluster.items("v1", "Pod")
                if (p["metadata"].get("labels") or {}).get(RUN_ID_LABEL) in names
            ]
        ),
        "the load's pods gone",
        timeout=180,
    )
    # And their Workloads (Kueue's finalizer goes after the job): the tests after this one
    # start with an empty queue, not 50 Workloads being deleted ahead of theirs.
    eventually(
        lambda: (
            not [
                w
                for w in cluster.items(KUEUE_API, "Workload")
                if {o.get("name") for o in w["metadata"].get("ownerReferences") or []} & names
            ]
        ),
        "the load's Workloads gone",
        timeout=180,
    )
