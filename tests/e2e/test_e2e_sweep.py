"""A 3-point sweep on the cluster: every point its own job with the sweep's label; two fit the
two-node quota, the third waits in Kueue until one ends; `runs --sweep` lists all three."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import JOBS, admitted, eventually, pods_of, remove_run

SWEEP_LABEL = "trainstack.io/sweep-id"


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_three_points_two_nodes(local_cluster, api):
    api_version, kind = JOBS[api]
    sweep = f"e2e-sw-{api[:3]}"
    runs: list[str] = []
    try:
        local_cluster.trainstack(
            "launch",
            "-m",
            "hydra/launcher=trainjob",
            "backend=kubernetes",
            "stack=local",
            "compute=p5.48xlarge",
            "compute.nodes=1",
            f"job.api={api}",
            "trainer.lr=1e-4,3e-4,1e-3",
            f"sweep_id={sweep}",
        )
        jobs = local_cluster.items(api_version, kind, f"{SWEEP_LABEL}={sweep}")
        runs = sorted(j["metadata"]["name"] for j in jobs)
        assert len(runs) == 3, runs
        eventually(
            lambda: sum(bool(admitted(local_cluster, kind, r)) for r in runs) == 2,
            "two points admitted (the quota is two nodes)",
        )
        waiting = [r for r in runs if not admitted(local_cluster, kind, r)]
        assert len(waiting) == 1
        first = next(r for r in runs if r not in waiting)
        eventually(lambda: pods_of(local_cluster, first, "Running"), f"{first} running")
        local_cluster.finish(first, 0)
        eventually(lambda: admitted(local_cluster, kind, waiting[0]), "the third point admitted")
        listed = local_cluster.trainstack(
            "runs", "--sweep", sweep, "stack=local", "backend=kubernetes"
        )
        assert all(r in listed for r in runs), listed
    finally:
        for run_id in runs:
            remove_run(local_cluster, run_id)
