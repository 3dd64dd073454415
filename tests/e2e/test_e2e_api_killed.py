"""Issue 47, scenario 3 against the real control plane: `trainstack serve`, started with the
stack's deployed arguments as its own ServiceAccount (test_e2e_serve.py `deployed_process`),
SIGKILLed between the points of a sweep (held there by the pause point of
jobs/backends/kubernetes/faults.py, as tests/api/test_api_killed.py does against the test
double) and started again. The restart rolls the half sweep back through the real API
server: its journal ConfigMap, the TrainJobs it names and their ConfigMaps are gone; posting
the sweep again makes each run exactly once. One `e2e-figure:` line: kill to restarted with
the rollback done.
"""

from __future__ import annotations

import time

from jobs.backends.kubernetes.faults import PAUSE_ENV
from tests.api.test_api_killed import JOURNAL_SELECTOR, client, post_until_killed
from tests.e2e.conftest import JOBS, RUN_ID_LABEL, eventually, remove_run
from tests.e2e.test_e2e_serve import TOKEN, USER, api_account, deployed_process

__all__ = ["api_account"]
SWEEP_ID = "e2e-killed"
SWEEP = {
    "overrides": ["compute=p5.48xlarge", "trainer.lr=1e-3,2e-3,3e-3"],
    "sweep_id": SWEEP_ID,
}
RUNS = [f"{SWEEP_ID}-{index}" for index in range(3)]
KIND = JOBS["trainjob"]  # the local stack's operator kind


def sweep_jobs(local_cluster) -> list[str]:
    jobs = local_cluster.items(*KIND, f"trainstack.io/sweep-id={SWEEP_ID}")
    return sorted(job["metadata"]["name"] for job in jobs)


def journals(local_cluster) -> list[dict]:
    return local_cluster.items("v1", "ConfigMap", JOURNAL_SELECTOR)


def leftovers(local_cluster) -> list[str]:
    """ConfigMaps of the sweep's runs (a run half submitted, or left by the rollback)."""
    return [
        config_map["metadata"]["name"]
        for run_id in RUNS
        for config_map in local_cluster.items("v1", "ConfigMap", f"{RUN_ID_LABEL}={run_id}")
    ]


def test_killed_between_points_of_a_sweep_the_restart_rolls_it_back(
    local_cluster, api_account, moto_s3, tmp_path
):
    api = deployed_process(local_cluster, api_account, moto_s3, tmp_path, {USER: TOKEN})
    try:
        api.start(env={PAUSE_ENV: "sweep:after-point-1"})
        request = post_until_killed(api, "/v1/sweeps", SWEEP, TOKEN)
        api.wait_for_line("paused at sweep:after-point-1", timeout_s=120)
        assert sweep_jobs(local_cluster) == RUNS[:2]  # a half sweep, for now
        assert len(journals(local_cluster)) == 1
        killed = time.monotonic()
        api.kill()
        request.join(timeout=30)

        api.start()
        eventually(lambda: sweep_jobs(local_cluster) == [], "the half sweep rolled back")
        recovered = time.monotonic() - killed
        assert f"sweep {SWEEP_ID} was cut short by a restart: rolled back 2 run(s)" in api.log()
        assert journals(local_cluster) == []
        eventually(lambda: leftovers(local_cluster) == [], "no ConfigMap of the sweep's runs")
        with client(api, TOKEN) as c:
            again = c.post("/v1/sweeps", json=SWEEP)
            assert again.status_code == 201, again.text
            assert [r["outcome"] for r in again.json()["runs"]] == ["created"] * 3
        jobs = local_cluster.items(*KIND, f"trainstack.io/sweep-id={SWEEP_ID}")
        assert sorted(job["metadata"]["name"] for job in jobs) == RUNS  # each once
        assert journals(local_cluster) == []
        print(
            f"\ne2e-figure: scenario 3 sweep killed after 2 of 3 points on the real cluster: "
            f"runs left of it 0, runs twice 0, half-submitted 0; kill to restarted with the "
            f"rollback done {recovered:.1f} s"
        )
    finally:
        api.stop()
        for run_id in RUNS:
            remove_run(local_cluster, run_id)
