"""Controllers killed (SIGKILL, no shutdown) and restarted while jobs are admitted, running,
preempted and cancelled (issue 47, scenario 1): Kueue, the Training Operator, JobSet, the
Trainer controller and KubeRay's operator, each while the state change it alone reconciles
happens. After each restart: every job is where it should be, with one Workload (one JobSet
for a TrainJob, one RayCluster for a RayJob), no pod started twice, and the ClusterQueue's
`status.flavorsUsage` equal to what its admitted Workloads hold.

Each restart prints one `e2e-figure:` line (pytest -s shows them): down_s (kill to restart),
restart_s (restart to the controller ready), reconcile_s (ready to the state change seen),
recovery_s (kill to the state change seen), and lost/duplicated counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from jobs.backends.kubernetes.client.kueue import parse_quantity
from localcluster import cluster
from localcluster.objects import local_stack
from localcluster.versions import JOBSET, KUBERAY, KUEUE, TRAINER, TRAINING_OPERATOR
from tests.e2e.conftest import (
    ALL_JOBS,
    KUEUE_API,
    NAMESPACE,
    RUN_ID_LABEL,
    admitted,
    conditions,
    eventually,
    pods_of,
    remove_run,
    workload_of,
)
from tests.e2e.test_e2e_queueing import JOBSET_API, running_pods
from tests.e2e.test_e2e_rayjob import deployment, ray_pods, submitter_pods

RESTARTED = (KUEUE.name, TRAINING_OPERATOR.name, JOBSET.name, TRAINER.name, KUBERAY.name)
TWO_NODES = ("compute=p5.48xlarge", "compute.nodes=2")
RAY_PROGRAM = ("runner=command", "runner.torchrun=false", "runner.command=[python,-c,pass]")
WHERE = ("stack=local", "backend=kubernetes")
KINDS = {api: kind for api, (_, kind) in ALL_JOBS.items()}


def restore(local_cluster) -> None:
    """Every controller this test may have killed runs (and is ready) again: before its runs
    are removed (a Workload keeps Kueue's finalizer until Kueue removes it), and for the
    tests after it on the session's cluster."""
    state = local_cluster.state
    state.refresh()
    for name in RESTARTED:
        if not cluster._alive(state, name):
            cluster.restart(state, name)


def owned_by(items: list[dict], kind: str, name: str) -> list[dict]:
    return [
        item
        for item in items
        if any(
            o["kind"] == kind and o["name"] == name
            for o in item["metadata"].get("ownerReferences") or []
        )
    ]


class Ledger:
    """The runs of this test (run id -> job.api), and what a restart may not change: the pods
    each has had (by uid: one started twice would be a second uid for the same place)."""

    def __init__(self, local_cluster) -> None:
        self.cluster = local_cluster
        self.runs: dict[str, str] = {}
        self.figures: list[dict] = []

    def launch(self, api: str, run_id: str, *extra: str) -> None:
        self.runs[run_id] = api
        program = RAY_PROGRAM if api == "rayjob" else ()
        self.cluster.launch(*TWO_NODES, f"job.api={api}", *program, f"run_id={run_id}", *extra)

    def delete(self, api: str, run_id: str) -> None:
        """Delete the job through the API (as `kubectl delete` does); no longer counted."""
        api_version, kind = ALL_JOBS[api]
        self.cluster.resource(api_version, kind).delete(
            name=run_id, namespace=NAMESPACE, body={"propagationPolicy": "Background"}
        )
        del self.runs[run_id]

    def refused_launch(self, api: str, run_id: str) -> str:
        """A launch its controller's webhooks refuse: what it printed (it leaves no job)."""
        printed = self.cluster.launch(*TWO_NODES, f"job.api={api}", f"run_id={run_id}", check=False)
        assert not self.cluster.items(*ALL_JOBS[api], f"{RUN_ID_LABEL}={run_id}"), printed
        return printed.strip().splitlines()[-1] if printed.strip() else ""

    def pod_uids(self, run_id: str, phase: str | None = "Running") -> set[str]:
        return {p["metadata"]["uid"] for p in pods_of(self.cluster, run_id, phase)}

    def duplicates(self) -> dict[str, int]:
        """Per run: the Workloads, JobSets and RayClusters past one (each should be 0)."""
        workloads = self.cluster.items(KUEUE_API, "Workload")
        jobsets = self.cluster.items(JOBSET_API, "JobSet")
        rayclusters = self.cluster.items("ray.io/v1", "RayCluster")
        extra = {}
        for run_id, api in self.runs.items():
            kind = KINDS[api]
            counts = [len(owned_by(workloads, kind, run_id))]
            if api == "trainjob":
                counts.append(len(owned_by(jobsets, kind, run_id)))
            if api == "rayjob":
                counts.append(len(owned_by(rayclusters, kind, run_id)))
            extra[run_id] = sum(max(0, count - 1) for count in counts)
        return extra

    def lost(self) -> list[str]:
        """Runs whose job or Workload is gone (none of this test's is deleted)."""
        return [
            run_id
            for run_id, api in self.runs.items()
            if workload_of(self.cluster, KINDS[api], run_id) is None
        ]

    def usage(self) -> tuple[dict, dict]:
        """(the ClusterQueue's flavorsUsage, the sum over its admitted, unfinished Workloads),
        each as (flavor, resource) -> amount, zeros left out."""
        name = local_stack().kueue.cluster_queue
        queue = self.cluster.get(KUEUE_API, "ClusterQueue", name, namespace=None)
        held: dict[tuple[str, str], float] = {}
        for flavor in (queue.get("status") or {}).get("flavorsUsage") or []:
            for resource in flavor.get("resources") or []:
                amount = parse_quantity(str(resource.get("total", "0")))
                if amount:
                    held[(flavor["name"], resource["name"])] = amount
        summed: dict[tuple[str, str], float] = {}
        for workload in self.cluster.items(KUEUE_API, "Workload"):
            states = conditions(workload)
            if states.get("QuotaReserved", {}).get("status") != "True":
                continue
            if states.get("Finished", {}).get("status") == "True":
                continue
            admission = (workload.get("status") or {}).get("admission") or {}
            if admission.get("clusterQueue") != name:
                continue
            for assignment in admission.get("podSetAssignments") or []:
                for resource, amount in (assignment.get("resourceUsage") or {}).items():
                    key = (assignment["flavors"][resource], resource)
                    summed[key] = summed.get(key, 0.0) + parse_quantity(str(amount))
        return held, {k: v for k, v in summed.items() if v}

    def check(self) -> dict:
        """After a recovery: nothing lost, nothing duplicated, the usage as admitted."""
        eventually(
            lambda: self.usage()[0] == self.usage()[1],
            "the ClusterQueue's usage equal to its admitted Workloads'",
            describe=self.usage,
        )
        lost, duplicated = self.lost(), self.duplicates()
        assert not lost, f"runs lost: {lost}"
        assert not any(duplicated.values()), f"objects past one per run: {duplicated}"
        return {"lost": len(lost), "duplicated": sum(duplicated.values())}

    def outage(
        self,
        name: str,
        while_down: Callable[[], None],
        reconciled: Callable[[], object],
        what: str,
    ) -> None:
        """Kill controller `name`, do `while_down`, restart it, wait for `reconciled`; check
        the ledger and print the figure."""
        state = self.cluster.state
        killed = cluster.kill(state, name)
        killed_at = time.monotonic()
        while_down()
        restarting = time.monotonic()
        cluster.restart(state, name)
        ready = time.monotonic()
        eventually(reconciled, what, timeout=120)
        seen = time.monotonic()
        figure = {
            "scenario": "controller-restart",
            "controller": name,
            "pid": [killed, state.pids[name]],
            "reconciled": what,
            "down_s": round(restarting - killed_at, 1),
            "restart_s": round(ready - restarting, 1),
            "reconcile_s": round(seen - ready, 1),
            "recovery_s": round(seen - killed_at, 1),
            **self.check(),
        }
        self.figures.append(figure)
        print(f"e2e-figure: {json.dumps(figure)}")


def waiting(local_cluster, kind: str, run_id: str) -> None:
    """`run_id`'s Workload is pending: Kueue tried it and reserved no quota. Its message is
    usually "insufficient unused quota", but a cycle that admitted another first says "no
    longer fits", and either stays until the next event: the state matters here, not the text."""
    eventually(
        lambda: (
            conditions(workload_of(local_cluster, kind, run_id) or {})
            .get("QuotaReserved", {})
            .get("status")
            == "False"
        ),
        f"{run_id} waiting for quota",
        describe=lambda: (
            (workload_of(local_cluster, kind, run_id) or {}).get("status"),
            local_cluster.get(
                KUEUE_API, "ClusterQueue", local_stack().kueue.cluster_queue, namespace=None
            ).get("status"),
        ),
    )


def jobs_ended(local_cluster, jobset: str, condition: str) -> bool:
    """Every Job of `jobset` has `condition` (the job controller's, not JobSet's)."""
    jobs = local_cluster.items("batch/v1", "Job", f"jobset.sigs.k8s.io/jobset-name={jobset}")
    return bool(jobs) and all(
        conditions(job).get(condition, {}).get("status") == "True" for job in jobs
    )


def status(local_cluster, run_id: str) -> str:
    return local_cluster.trainstack("status", run_id, *WHERE).lower()


def test_jobs_survive_each_controller_killed_and_restarted(local_cluster):
    ledger = Ledger(local_cluster)
    first, low, high, ray = "e2e-cr-first", "e2e-cr-low", "e2e-cr-high", "e2e-cr-ray"
    refused: list[str] = []
    # Quota and queue as this test counts them: no Workload of an earlier test still going.
    eventually(
        lambda: not local_cluster.items(KUEUE_API, "Workload"),
        "no Workloads left by earlier tests",
        timeout=180,
        describe=lambda: [
            w["metadata"]["name"] for w in local_cluster.items(KUEUE_API, "Workload")
        ],
    )
    try:
        # Kueue: a job is deleted while Kueue is down (its webhooks refuse any change to a
        # job or pod meanwhile: a launch, a cancel, a pod's end); restarted, Kueue releases
        # its quota and admits the one waiting, once.
        ledger.launch("trainjob", first)
        running_pods(local_cluster, first, 2)
        ledger.launch("pytorchjob", low, "job.priority=low")
        waiting(local_cluster, "PyTorchJob", low)
        ledger.outage(
            KUEUE.name,
            lambda: (
                ledger.delete("trainjob", first),
                refused.append(ledger.refused_launch("trainjob", "e2e-cr-refused")),
            ),
            lambda: (
                admitted(local_cluster, "PyTorchJob", low)
                and len(pods_of(local_cluster, low, "Running")) == 2
                and not workload_of(local_cluster, "TrainJob", first)
            ),
            f"{first} deleted, {low} admitted and running",
        )
        assert not pods_of(local_cluster, first, "Running")
        print(f"launch while Kueue is down: {refused}")
        assert not local_cluster.items("v1", "ConfigMap", f"{RUN_ID_LABEL}=e2e-cr-refused")
        low_pods = ledger.pod_uids(low)

        # The Training Operator: a higher priority job preempts its PyTorchJob while it is
        # down; restarted, it stops the preempted pods and the higher one starts.
        ledger.outage(
            TRAINING_OPERATOR.name,
            lambda: ledger.launch("trainjob", high, "job.priority=high"),
            lambda: (
                not pods_of(local_cluster, low, "Running")
                and len(pods_of(local_cluster, high, "Running")) == 2
            ),
            f"{low} preempted (its pods stopped), {high} running",
        )
        evicted = conditions(workload_of(local_cluster, "PyTorchJob", low)).get("Evicted", {})
        assert evicted.get("reason") == "Preempted", evicted
        assert ledger.pod_uids(low, None) <= low_pods, "the preempted job got new pods"
        high_pods = ledger.pod_uids(high)

        # JobSet: the running job's pods are killed (137) and its Jobs fail while JobSet is
        # down; restarted, it restarts the JobSet once (its runtime's policy), two new pods.
        ledger.outage(
            JOBSET.name,
            lambda: (
                local_cluster.finish(high, 137),
                eventually(
                    lambda: jobs_ended(local_cluster, high, "Failed"), f"{high}'s Jobs failed"
                ),
            ),
            lambda: (
                len(ledger.pod_uids(high) - high_pods) == 2
                and (local_cluster.get(JOBSET_API, "JobSet", high).get("status") or {}).get(
                    "restarts"
                )
            ),
            f"{high}'s JobSet restarted, 2 new pods running",
        )
        restarts = local_cluster.get(JOBSET_API, "JobSet", high)["status"]["restarts"]
        assert restarts == 1, f"one failure restarted the JobSet {restarts} times"
        assert len(pods_of(local_cluster, high, "Running")) == 2
        high_pods = ledger.pod_uids(high)

        # The Trainer: the TrainJob's pods succeed and its JobSet completes while the Trainer
        # is down; restarted, it marks the TrainJob complete, Kueue frees its quota and the
        # preempted job comes back.
        ledger.outage(
            TRAINER.name,
            lambda: (
                local_cluster.finish(high, 0),
                eventually(
                    lambda: (
                        conditions(local_cluster.get(JOBSET_API, "JobSet", high))
                        .get("Completed", {})
                        .get("status")
                        == "True"
                    ),
                    f"{high}'s JobSet completed",
                ),
            ),
            lambda: (
                conditions(local_cluster.get("trainer.kubeflow.org/v1alpha1", "TrainJob", high))
                .get("Complete", {})
                .get("status")
                == "True"
                and admitted(local_cluster, "PyTorchJob", low)
                and len(pods_of(local_cluster, low, "Running")) == 2
            ),
            f"{high} complete, {low} admitted again and running",
        )
        assert "succeeded" in status(local_cluster, high)
        assert ledger.pod_uids(high, None) == high_pods, "a completed job got new pods"

        # KubeRay: a RayJob waits for quota; the job ahead is cancelled while KubeRay is
        # down (Kueue admits the RayJob); restarted, KubeRay starts its Ray cluster, once.
        ledger.launch("rayjob", ray)
        waiting(local_cluster, "RayJob", ray)
        ledger.outage(
            KUBERAY.name,
            lambda: local_cluster.trainstack("cancel", low, *WHERE),
            lambda: (
                len(ray_pods(local_cluster, ray)) == 3
                and submitter_pods(local_cluster, ray, "Running")
                and deployment(local_cluster, ray) == "Running"
            ),
            f"{low} cancelled, {ray}'s Ray cluster and driver running",
        )
        assert "cancelled" in status(local_cluster, low)
        assert not pods_of(local_cluster, low, "Running")
        assert len(ledger.figures) == len(RESTARTED)
    finally:
        restore(local_cluster)
        for run_id in (first, low, high, ray, "e2e-cr-refused"):
            remove_run(local_cluster, run_id)
