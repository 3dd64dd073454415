"""The double (tests/k8s: fake apiserver, operator and Kueue) against the real components: one
scenario — a low-priority job admitted, a second one held for quota, a high-priority one
preempting the first — runs on both, for each job API, and what each reports is compared: the
Workload's conditions and the job's (type, status, reason), Kueue's messages (their shape), and what
trainstack's backend makes of them (state, finished).

The double does not compute quota: the test drives it (admit, preempt) at the moments the real
Kueue acted, with the very manifests trainstack submitted to the real cluster. Its pods hold
(run until stopped), as kwok's do: no container runs, so a pod ends only when told to. Both sides
settle asynchronously (Kueue's PodsReady follows the TrainJob's jobsStatus, which follows the
JobSet's), so each comparison waits a while for them to agree before it records a difference."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from infra.kubeflow_trainer import runtime_objects
from jobs.backends.kubernetes.backend import KubernetesBackend
from jobs.backends.kubernetes.client.submit import submit
from jobs.backends.kubernetes.submitting import ClusterSettings
from localcluster.objects import local_stack
from testing_support.k8s.cluster import seed_cluster, seed_trainer
from testing_support.k8s.fake_apiserver import FakeKubeApiServer
from testing_support.k8s.fake_kueue import PENDING_MESSAGE, FakeKueue
from testing_support.k8s.fake_operator import FakeOperator, JobPlan
from testing_support.k8s.fake_trainer import FakeTrainer, TrainPlan
from tests.e2e.conftest import (
    JOBS,
    NAMESPACE,
    admitted,
    conditions,
    eventually,
    pods_of,
    remove_run,
    workload_of,
)

PLURALS = {"TrainJob": "trainjobs", "PyTorchJob": "pytorchjobs"}
SHORT = (
    r"insufficient unused quota for [\w./-]+ in flavor [\w-]+, \w+ more needed"
    r"|insufficient quota for [\w./-]+ in flavor [\w-]+, previously considered podsets "
    r"requests \(\w+\) \+ current podset request \(\w+\) > maximum capacity \(\w+\)"
)
POD_SET = rf"couldn't assign flavors to pod set [\w-]+: (?:{SHORT})(, (?:{SHORT}))*"
PENDING = re.compile(rf"{POD_SET}(; {POD_SET})*")
"""Kueue's message names every covered resource that is short (the real one: cpu, hugepages,
memory, GPUs and EFA), one clause each, for each pod set (a PyTorchJob: master; worker)."""
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def shape(workload: dict) -> dict[str, tuple[str, str]]:
    return {t: (c["status"], c.get("reason", "")) for t, c in conditions(workload).items()}


def seen(backend: KubernetesBackend, run_id: str) -> tuple[str, bool]:
    status = backend.status(run_id)
    return status.state, status.finished


SETTLE_S = 30.0
"""How long a comparison waits for the two sides to agree."""


def submitted(cluster, api: str, run_id: str) -> list[dict]:
    """What trainstack sent for `run_id`, read back without the server's fields."""
    api_version, kind = JOBS[api]
    objs = [
        *cluster.items("v1", "ConfigMap", f"trainstack.io/run-id={run_id}"),
        cluster.get(api_version, kind, run_id),
    ]
    for obj in objs:
        obj.pop("status", None)
        meta = obj["metadata"]
        for key in (*SERVER_FIELDS, "managed_fields", "creation_timestamp", "resource_version"):
            meta.pop(key, None)
    # As trainstack sent it: created suspended for Kueue (an admitted one Kueue has un-suspended).
    spec = objs[-1]["spec"]
    (spec if kind == "TrainJob" else spec.setdefault("runPolicy", {}))["suspend"] = True
    return objs


@pytest.fixture
def double(tmp_path: Path):
    server = FakeKubeApiServer().start()
    # Both hold, as kwok's pods do: they run until told to end.
    FakeOperator(server, JobPlan(hold=True))
    FakeTrainer(server, TrainPlan(hold=True))
    kueue = FakeKueue(server)
    seed_cluster(server)
    seed_trainer(server, "p5.48xlarge")
    config = local_stack()  # the runtimes the real cluster has, by the same names
    for runtime in runtime_objects(config.gpu_node_groups, config.service_account):
        server.put("clustertrainingruntimes", runtime)
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    yield server, kueue, kubeconfig
    server.operator.shutdown()
    server.trainer.shutdown()
    server.stop()


@pytest.mark.parametrize("api", sorted(JOBS))
def test_queue_and_preemption_read_the_same_on_both(local_cluster, double, api):
    server, kueue, kubeconfig = double
    _, kind = JOBS[api]
    fake = KubernetesBackend(ClusterSettings(str(kubeconfig), "fake", NAMESPACE, job_api=api))
    real = KubernetesBackend(
        ClusterSettings(str(local_cluster.state.kubeconfig), None, NAMESPACE, api)
    )
    low, held, high = (f"e2e-d-{what}-{api[:3]}" for what in ("low", "held", "high"))
    two = ("compute=p5.48xlarge", "compute.nodes=2", f"job.api={api}")
    diffs: list[str] = []

    def observed(run_id: str) -> dict[str, object]:
        real_workload = workload_of(local_cluster, kind, run_id) or {}
        fake_workload = server.get("workloads", kueue.workload_name(run_id), NAMESPACE) or {}
        real_job = local_cluster.get(*JOBS[api], run_id)
        fake_job = server.get(PLURALS[kind], run_id, NAMESPACE) or {}
        return {
            "Workload conditions": (shape(real_workload), shape(fake_workload)),
            f"{kind} conditions": (shape(real_job), shape(fake_job)),
            "status": (seen(real, run_id), seen(fake, run_id)),
        }

    def compare(what: str, run_id: str) -> None:
        deadline = time.monotonic() + SETTLE_S
        while True:
            differ = {k: pair for k, pair in observed(run_id).items() if pair[0] != pair[1]}
            if not differ or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for key, (on_real, on_double) in differ.items():
            diffs.append(f"{what}: {key} real {on_real} double {on_double}")

    try:
        local_cluster.launch(*two, "job.priority=low", f"run_id={low}")
        eventually(lambda: admitted(local_cluster, kind, low), f"{low} admitted")
        eventually(lambda: len(pods_of(local_cluster, low, "Running")) == 2, f"{low} running")
        submit(fake.cluster, submitted(local_cluster, api, low))
        kueue.admit(low)
        compare("admitted and running", low)

        local_cluster.launch(*two, "job.priority=low", f"run_id={held}")
        message = eventually(
            lambda: (
                conditions(workload_of(local_cluster, kind, held) or {})
                .get("QuotaReserved", {})
                .get("message")
            ),
            "Kueue's reason for the held job",
        )
        submit(fake.cluster, submitted(local_cluster, api, held))
        assert PENDING.fullmatch(message), f"the real message changed shape: {message}"
        assert PENDING.fullmatch(PENDING_MESSAGE)
        compare("held for quota", held)

        local_cluster.launch(*two, "job.priority=high", f"run_id={high}")
        eventually(lambda: admitted(local_cluster, kind, high), f"{high} admitted")
        submit(fake.cluster, submitted(local_cluster, api, high))
        kueue.preempt(low)
        kueue.admit(high)
        compare("preempted", low)
        compare("preempting", high)
    finally:
        for run_id in (low, held, high):
            remove_run(local_cluster, run_id)
    assert not diffs, "the double and the real components differ:\n" + "\n".join(diffs)
