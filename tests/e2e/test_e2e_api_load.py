"""Issue 47, scenario 4 against the real control plane: 50 users at once on `trainstack serve`
started with the stack's deployed arguments as its own ServiceAccount (test_e2e_serve.py
`deployed_api`), each submitting runs, listing after each, following one run's log, sending
one submission twice and one the service refuses (testing_support/api_load.py).

What the API server holds afterwards is the judge: no 5xx, no run twice, every accepted run
there exactly once, no refused run there. Each user submits E2E_LOAD_RUNS runs (default 1, so
the tier stays short); benchmarks/bench_api_load_localcluster.py runs the full 50 x 10 on
the real control plane for the figures (benchmarks/bench_api_load.py: on the test double).
"""

from __future__ import annotations

import asyncio
import os

from testing_support.api_load import figures, run_load
from testing_support.deployed_api import deployed_api
from testing_support.local_control_plane import remove_jobs
from tests.e2e.conftest import JOBS
from tests.e2e.test_e2e_serve import api_account

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
            mine = {j["metadata"]["name"] for j in local_cluster.items(*KIND)}
            remove_jobs(local_cluster, *KIND, {n for n in mine if n.split("-")[0] in tokens})
