"""The Python API on the real local control plane (issue 42): the one scenario the local backend
and the Training API also run (tests/python_api/scenario.py), here through `trainstack.launch`
in this process with the local stack and backend=kubernetes, with the same states and the same
exceptions; and a run queued behind another job, Kueue's own reason in its status."""

from __future__ import annotations

import pytest

import trainstack
from localcluster.objects import STACK
from tests.e2e.conftest import eventually, remove_run
from tests.python_api.scenario import lifecycle

ON_CLUSTER = (
    f"stack={STACK}",
    "backend=kubernetes",
    "compute=p5.48xlarge",
    "compute.nodes=2",  # both p5 nodes: the whole quota, so a second run waits
)


@pytest.fixture
def here(local_cluster, monkeypatch):
    """This process pointed at the cluster as the CLI's commands are (tests/e2e/conftest.py
    Cluster.trainstack): the stack's config dir, its kubeconfig, moto's S3, its workdir."""
    for key, value in local_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TRAINSTACK_CONFIG_PATH", str(local_cluster.config_dir))
    monkeypatch.setenv("KUBECONFIG", str(local_cluster.state.kubeconfig))
    monkeypatch.chdir(local_cluster.workdir)
    return local_cluster


def launch(*overrides: str) -> trainstack.Run:
    return trainstack.launch(*ON_CLUSTER, *overrides)


def find(run_id: str) -> trainstack.Run:
    return trainstack.run(run_id, f"stack={STACK}", backend="kubernetes")


def test_the_shared_scenario_on_the_cluster(here):
    try:
        lifecycle(launch, find)
    finally:
        remove_run(here, "scenario")


def test_a_run_queued_behind_another_says_kueues_reason_until_the_first_is_cancelled(here):
    first_id, second_id = "e2e-py-first", "e2e-py-second"
    try:
        first = launch(f"run_id={first_id}")
        eventually(lambda: first.status().state == "running", f"{first_id} running")
        second = launch(f"run_id={second_id}")
        status = eventually(
            lambda: (s := second.status()).queued_reason and s, f"{second_id} queued"
        )
        assert status.state == "queued"
        assert "insufficient unused quota" in status.queued_reason, status
        first.cancel()
        with pytest.raises(trainstack.RunFailed) as stopped:
            first.wait(timeout=60, poll=0.2)
        assert stopped.value.state == "cancelled"
        eventually(lambda: second.status().state == "running", f"{second_id} admitted")
        second.cancel()
        with pytest.raises(trainstack.RunFailed) as stopped:
            second.wait(timeout=60, poll=0.2)
        assert stopped.value.state == "cancelled" == find(second_id).status().state
    finally:
        for run_id in (first_id, second_id):
            remove_run(here, run_id)
