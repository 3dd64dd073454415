"""A TrainJob and a PyTorchJob launched with `stack=local` go through the real Kueue, JobSet,
Trainer, Training Operator, scheduler and kwok: each step checks what the API server holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jobs.backends.kubernetes.manifests import CONFIG_MOUNT
from jobs.backends.kubernetes.pod_parts import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL
from tests.e2e.conftest import (
    JOBS,
    RUN_ID_LABEL,
    admitted,
    conditions,
    eventually,
    pods_of,
    remove_run,
    workload_of,
)


@dataclass(frozen=True)
class Launched:
    api: str
    api_version: str
    kind: str
    run_id: str
    printed: str


@pytest.fixture(scope="module", params=sorted(JOBS))
def launched(request, local_cluster):
    """One job of each API, two nodes of p5 (the whole quota), left running for the tests of
    this module, then cancelled."""
    api = request.param
    api_version, kind = JOBS[api]
    run_id = f"e2e-{api}"
    printed = local_cluster.launch(
        "compute=p5.48xlarge",
        "compute.nodes=2",
        "compute.capacity=on-demand",
        f"job.api={api}",
        f"run_id={run_id}",
    )
    yield Launched(api, api_version, kind, run_id, printed)
    remove_run(local_cluster, run_id)


def test_created_suspended_and_admitted_by_kueue(local_cluster, launched):
    api_version, kind, run_id = launched.api_version, launched.kind, launched.run_id
    job = local_cluster.get(api_version, kind, run_id)
    labels = job["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "training"
    assert labels[RUN_ID_LABEL] == run_id
    workload = eventually(
        lambda: (
            admitted(local_cluster, kind, run_id)
            or conditions(workload_of(local_cluster, kind, run_id) or {})
        ),
        f"Kueue admitting {kind} {run_id}",
    )
    assert conditions(workload)["Admitted"]["status"] == "True", workload
    flavors = workload["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert set(flavors.values()) == {"p5"}


def test_pods_run_with_what_trainstack_set(local_cluster, launched):
    """After Kueue's admission the pods still have the config mount, the run-id label, the
    service account and the capacity selector (Kueue adds its flavor's label next to them)."""
    api_version, kind, run_id = launched.api_version, launched.kind, launched.run_id

    def state():
        job = local_cluster.get(api_version, kind, run_id)
        phases = [p["status"].get("phase") for p in pods_of(local_cluster, run_id)]
        return {"pods": phases, "job": conditions(job)}

    pods = eventually(
        lambda: (
            len(pods_of(local_cluster, run_id, "Running")) == 2
            and pods_of(local_cluster, run_id, "Running")
        ),
        f"2 running pods of {run_id}",
        describe=state,
    )
    for pod in pods:
        spec = pod["spec"]
        assert pod["metadata"]["labels"][RUN_ID_LABEL] == run_id
        assert spec["serviceAccountName"] == "trainer"
        selector = spec.get("nodeSelector") or {}
        assert selector.get(CAPACITY_TYPE_LABEL) == "ON_DEMAND", selector
        assert selector.get(INSTANCE_TYPE_LABEL) == "p5.48xlarge", selector
        assert selector.get("trainstack.io/node-group") == "p5", selector
        mounts = [m for c in spec["containers"] for m in c.get("volumeMounts", [])]
        assert any(m["mountPath"] == CONFIG_MOUNT["mountPath"] for m in mounts), mounts
        assert spec["nodeName"] in ("p5-0", "p5-1")


def test_status_reads_the_real_objects(local_cluster, launched):
    run_id = launched.run_id
    printed = local_cluster.trainstack("status", run_id, "stack=local", "backend=kubernetes")
    assert run_id in printed
    listed = local_cluster.trainstack("runs", "stack=local", "backend=kubernetes")
    assert run_id in listed


def test_logs_come_from_kwoks_kubelet(local_cluster, launched):
    """`trainstack logs` reads each rank's pod log through the API server's pods/log, which
    asks the pod's node: kwok's kubelet port serves its ClusterLogs file for simulated pods
    (localcluster `_stages`)."""
    run_id = launched.run_id
    eventually(
        lambda: len(pods_of(local_cluster, run_id, "Running")) == 2,
        f"2 running pods of {run_id}",
    )
    served = (local_cluster.state.directory / "pod.log").read_text().split(" F ", 1)[1].strip()
    for rank in (0, 1):
        printed = local_cluster.trainstack(
            "logs", run_id, "--rank", str(rank), "stack=local", "backend=kubernetes"
        )
        assert served in printed, printed
