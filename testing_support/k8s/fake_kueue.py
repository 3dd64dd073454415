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
    "needed"
)
"""As the real Kueue says it (tests/e2e/test_e2e_double_agrees.py): one clause per covered
resource that is short, not only the GPUs."""


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


def _condition(kind: str, status: bool, reason: str, message: str) -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


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
                "conditions": [_condition("QuotaReserved", False, "Pending", PENDING_MESSAGE)]
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
            self._set(name, namespace, False, workload["status"]["conditions"])

    def workload_patched(self, workload: dict) -> None:
        if (workload.get("spec") or {}).get("active", True):
            return
        owner = workload["metadata"]["ownerReferences"][0]["name"]
        namespace = workload["metadata"]["namespace"]
        if self._true(workload, "Evicted"):
            return
        deactivated = [
            _condition("QuotaReserved", False, "Pending", "The workload is deactivated"),
            _condition("Admitted", False, "NoReservation", "The workload has no reservation"),
            _condition("Evicted", True, "Deactivated", "The workload is deactivated"),
        ]
        self._set(owner, namespace, True, deactivated)

    def _set(self, job_name: str, namespace: str, suspend: bool, conditions: list[dict]) -> None:
        self.server.update(
            "workloads",
            self.workload_name(job_name),
            namespace,
            lambda w: w.setdefault("status", {}).update(conditions=conditions),
        )
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
            _condition("Admitted", True, "Admitted", "The workload is admitted"),
        ]
        self._set(job_name, namespace, False, admitted)

    def preempt(self, job_name: str, namespace: str = "training") -> None:
        evicted = [
            _condition("QuotaReserved", False, "Pending", PENDING_MESSAGE),
            _condition("Admitted", False, "NoReservation", "The workload has no reservation"),
            _condition(
                "Evicted", True, "Preempted", "Preempted to accommodate a higher priority Workload"
            ),
        ]
        self._set(job_name, namespace, True, evicted)
