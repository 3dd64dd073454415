"""Kueue, simulated inside the fake apiserver (test-only): queue-labelled PyTorchJobs and
TrainJobs (its `trainer.kubeflow.org/trainjob` integration) get a Workload
(`kueue.x-k8s.io/v1beta1`) that stays pending until a test admits it; `admit`
un-suspends the job (Kueue is the only one that does), `preempt` suspends it again (the
operator then deletes its pods, as on a real preemption) and marks the Workload evicted.
Both rewrite a TrainJob as Kueue does, with its vendored Trainer types: fields they lack are
gone (testing_support/k8s/data/kueue_trainer_fields.json).

As Kueue's job reconciler does (kubernetes-sigs/kueue v0.19.2,
pkg/controller/jobframework/reconciler.go, "handle job is suspended"), a job someone else
suspends while its Workload is admitted is un-suspended again; a Workload set inactive
(`spec.active: false`) is evicted with reason Deactivated (pkg/controller/core/
workload_controller.go), its job suspended and its quota released, and is never admitted.

The conditions are Kueue's, set one per type as `apimeta.SetStatusCondition` does (others kept),
compared with the real Kueue by tests/e2e/test_e2e_double_agrees.py (all kubernetes-sigs/kueue
v0.19.2):
- PodsReady on every Workload (pkg/controller/jobframework/reconciler.go,
  `generatePodsReadyCondition`): False/WaitForStart while not admitted; once admitted True/Started
  when the job's pods are ready (a TrainJob: ready + succeeded over `status.jobsStatus` equals its
  nodes, pkg/controller/jobs/trainjob/trainjob_controller.go `PodsReady`; a PyTorchJob: its
  Running condition is True, pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go),
  False/WaitForRecovery when they were ready and no longer are, True/Recovered after that.
- A preemption (pkg/scheduler/preemption, pkg/workload/workload.go `SetPreemptedCondition`;
  jobframework/reconciler.go "handle eviction"): Evicted True/Preempted, Preempted
  True/InClusterQueue, Requeued True/Preempted (False/<reason> for any other eviction, such as
  Deactivated), QuotaReserved False/Pending, Admitted False/NoReservation.
- A (re-)admission (pkg/workload/workload.go `SetQuotaReservation`): a True Evicted or Preempted
  becomes False/QuotaReserved; Requeued is kept.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from testing_support.k8s.fake_apiserver import FakeKubeApiServer

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PENDING_MESSAGE = (
    "couldn't assign flavors to pod set master: insufficient unused quota for cpu in flavor "
    "p4d, 96 more needed, insufficient unused quota for nvidia.com/gpu in flavor p4d, 8 more "
    "needed, insufficient quota for cpu in flavor system, previously considered podsets "
    "requests (0) + current podset request (96) > maximum capacity (8)"
)
"""As the real Kueue says it (tests/e2e/test_e2e_double_agrees.py): one clause per covered
resource that is short in the GPU flavor, not only the GPUs, then the first that can never fit
in `system`, the ClusterQueue's last flavor."""


TRAINER_FIELDS = json.loads(
    (Path(__file__).parent / "data" / "kueue_trainer_fields.json").read_text()
)["trainjob"]["spec"]
"""The TrainJob spec fields the pinned Kueue's vendored Trainer types hold."""


def as_kueue_writes_it(value, tree=TRAINER_FIELDS):
    """`value` with what Kueue's types lack dropped: Kueue updates a TrainJob whole with them
    (kubernetes-sigs/kueue v0.19.2, pkg/controller/jobs/trainjob/trainjob_controller.go)."""
    if tree == "*":
        return value
    if isinstance(value, list):
        return [as_kueue_writes_it(item, tree) for item in value]
    if not isinstance(value, dict):
        return value
    return {k: as_kueue_writes_it(v, tree[k]) for k, v in value.items() if k in tree}


NOT_READY = "Not all pods are ready or succeeded"
RECOVERING = "At least one pod has failed, waiting for recovery"
READY = "All pods reached readiness and the workload is running"
"""PodsReady's messages (jobframework/reconciler.go, `generatePodsReadyCondition`)."""


def _condition(kind: str, status: bool, reason: str, message: str) -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def _set_conditions(conditions: list[dict], changes: list[dict]) -> list[dict]:
    """`conditions` with each of `changes` set by type (apimeta.SetStatusCondition: a new type
    is appended, an existing one replaced in place, every other kept)."""
    merged = list(conditions)
    for change in changes:
        at = next((i for i, c in enumerate(merged) if c["type"] == change["type"]), None)
        if at is None:
            merged.append(change)
        else:
            merged[at] = change
    return merged


def _find(conditions: list[dict], kind: str) -> dict | None:
    return next((c for c in conditions if c["type"] == kind), None)


def pods_ready(job: dict) -> bool:
    """Kueue's `PodsReady` of a job (see the module docstring)."""
    status = job.get("status") or {}
    if job["kind"] == "TrainJob":
        nodes = int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
        ready = sum(
            int(s.get("ready") or 0) + int(s.get("succeeded") or 0)
            for s in status.get("jobsStatus") or []
        )
        return ready == nodes
    return any(
        c["type"] == "Running" and c["status"] == "True" for c in status.get("conditions") or []
    )


def pods_ready_condition(conditions: list[dict], ready: bool) -> dict:
    """The Workload's PodsReady condition, as `generatePodsReadyCondition` makes it."""
    admitted = _find(conditions, "Admitted")
    if not admitted or admitted["status"] != "True":
        return _condition("PodsReady", False, "WaitForStart", NOT_READY)
    current = _find(conditions, "PodsReady")
    if ready:
        recovering = current is not None and current["reason"] in ("WaitForRecovery", "Recovered")
        return _condition("PodsReady", True, "Recovered" if recovering else "Started", READY)
    if current is not None and (
        current["status"] == "True" or current["reason"] == "WaitForRecovery"
    ):
        return _condition("PodsReady", False, "WaitForRecovery", RECOVERING)
    return _condition("PodsReady", False, "WaitForStart", NOT_READY)


class FakeKueue:
    def __init__(self, server: FakeKubeApiServer) -> None:
        self.server = server
        self.kinds: dict[str, str] = {}
        """job name -> its kind (PyTorchJob or TrainJob)."""
        server.kueue = self

    def workload_name(self, job_name: str) -> str:
        return f"{self.kinds.get(job_name, 'PyTorchJob').lower()}-{job_name}"

    def job_created(self, job: dict) -> None:
        meta = job["metadata"]
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if not queue:
            return
        self.kinds[meta["name"]] = job["kind"]
        workload = {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "metadata": {
                "name": self.workload_name(meta["name"]),
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [
                    {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"]}
                    | {"uid": meta["uid"], "controller": True}
                ],
            },
            "spec": {"queueName": queue},
            "status": {
                "conditions": [
                    _condition("QuotaReserved", False, "Pending", PENDING_MESSAGE),
                    _condition("PodsReady", False, "WaitForStart", NOT_READY),
                ]
            },
        }
        self.server.put("workloads", workload, meta["namespace"])

    def _workload(self, job_name: str, namespace: str) -> dict | None:
        return self.server.get("workloads", self.workload_name(job_name), namespace)

    @staticmethod
    def _true(workload: dict, kind: str) -> bool:
        conditions = (workload.get("status") or {}).get("conditions") or []
        return any(c["type"] == kind and c["status"] == "True" for c in conditions)

    def job_patched(self, job: dict) -> None:
        """Someone else suspended an admitted job: Kueue starts it again."""
        meta = job["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        if name not in self.kinds:
            return
        spec = job["spec"]
        suspended = (
            spec.get("suspend")
            if job["kind"] == "TrainJob"
            else ((spec.get("runPolicy") or {}).get("suspend"))
        )
        workload = self._workload(name, namespace)
        admitted = workload is not None and self._true(workload, "Admitted")
        if suspended and admitted and (workload.get("spec") or {}).get("active", True):
            self._set(name, namespace, False, [])

    def job_status_changed(self, job: dict) -> None:
        """The job's controller changed its status (pods ready or not): PodsReady again."""
        meta = job["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        if name not in self.kinds:
            return
        ready = pods_ready(job)

        def mutate(workload: dict) -> None:
            conditions = (workload.get("status") or {}).get("conditions") or []
            wanted = pods_ready_condition(conditions, ready)
            current = _find(conditions, "PodsReady") or {}
            if (current.get("status"), current.get("reason")) != (
                wanted["status"],
                wanted["reason"],
            ):
                workload["status"]["conditions"] = _set_conditions(conditions, [wanted])

        self.server.update("workloads", self.workload_name(name), namespace, mutate)

    def workload_patched(self, workload: dict) -> None:
        if (workload.get("spec") or {}).get("active", True):
            return
        owner = workload["metadata"]["ownerReferences"][0]["name"]
        namespace = workload["metadata"]["namespace"]
        if self._true(workload, "Evicted"):
            return
        conditions = (workload.get("status") or {}).get("conditions") or []
        reserved = _find(conditions, "QuotaReserved") or {}
        deactivated = [
            _condition("QuotaReserved", False, "Pending", "The workload is deactivated"),
            _condition("Admitted", False, "NoReservation", "The workload has no reservation"),
            _condition("Evicted", True, "Deactivated", "The workload is deactivated"),
        ]
        if reserved.get("status") == "True":  # the quota it held is released, not requeued
            deactivated.append(
                _condition("Requeued", False, "Deactivated", "The workload is deactivated")
            )
        self._set(owner, namespace, True, deactivated)

    def _set(self, job_name: str, namespace: str, suspend: bool, changes: list[dict]) -> None:
        """Set `changes` on the Workload's conditions (PodsReady follows), then (un)suspend
        the job, as Kueue does."""

        plural = "trainjobs" if self.kinds.get(job_name) == "TrainJob" else "pytorchjobs"
        job = self.server.get(plural, job_name, namespace)

        def mutate(workload: dict) -> None:
            status = workload.setdefault("status", {})
            conditions = _set_conditions(status.get("conditions") or [], changes)
            ready = pods_ready_condition(conditions, job is not None and pods_ready(job))
            status["conditions"] = _set_conditions(conditions, [ready])

        self.server.update("workloads", self.workload_name(job_name), namespace, mutate)
        if self.kinds.get(job_name) == "TrainJob":

            def rewrite(job: dict) -> None:
                job["spec"] = as_kueue_writes_it(job["spec"]) | {"suspend": suspend}

            job = self.server.update("trainjobs", job_name, namespace, rewrite)
            if job is not None and self.server.trainer is not None:
                self.server.trainer.job_patched(job)
            return
        job = self.server.update(
            "pytorchjobs",
            job_name,
            namespace,
            lambda j: j["spec"].setdefault("runPolicy", {}).update(suspend=suspend),
        )
        if job is not None and self.server.operator is not None:
            self.server.operator.job_patched(job)

    def admit(self, job_name: str, namespace: str = "training") -> None:
        """Admit the job's Workload, unless it is inactive (Kueue never admits one)."""
        workload = self._workload(job_name, namespace)
        if workload is not None and not (workload.get("spec") or {}).get("active", True):
            return
        admitted = [
            _condition("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue"),
        ]
        for kind in ("Evicted", "Preempted"):  # SetQuotaReservation's resetActiveCondition
            active = workload and _find(workload["status"]["conditions"], kind)
            if active and active["status"] == "True":
                message = f"Previously: {active['message']}"
                admitted.append(_condition(kind, False, "QuotaReserved", message))
        admitted.append(_condition("Admitted", True, "Admitted", "The workload is admitted"))
        self._set(job_name, namespace, False, admitted)

    def preempt(self, job_name: str, namespace: str = "training") -> None:
        why = "Preempted to accommodate a higher priority Workload"
        evicted = [
            _condition("Evicted", True, "Preempted", why),
            _condition("Preempted", True, "InClusterQueue", why),
            _condition("Requeued", True, "Preempted", why),
            _condition("QuotaReserved", False, "Pending", PENDING_MESSAGE),
            _condition("Admitted", False, "NoReservation", "The workload has no reservation"),
        ]
        self._set(job_name, namespace, True, evicted)
