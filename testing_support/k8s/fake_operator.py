"""The Kubeflow training operator, simulated inside the fake apiserver (test-only).

Each created PyTorchJob gets a thread that walks it through the operator's conditions
(Created -> Running [-> Restarting -> Running] -> Succeeded | Failed), creates its pods
(`<job>-master-0`, `<job>-worker-<i>`, owned by the job) and writes their logs. What happens
to a job is scripted per name with `JobPlan`s (one per submission, in order). Setting
`spec.runPolicy.suspend` deletes the pods and adds the Suspended condition, as the operator does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from testing_support.k8s.fake_apiserver import FakeKubeApiServer
from testing_support.k8s.fake_pods import FakeController, Plan, now

JOB_LABEL = "training.kubeflow.org/job-name"


@dataclass
class JobPlan(Plan):
    kill_pod_at: int | None = None
    """Kill the master pod at this step; the operator restarts it (condition Restarting)."""
    lose_node_at: int | None = None
    """Lose worker 0's node at this step: its pod vanishes (no SIGTERM, no exit code) and the
    operator recreates it; the job goes Restarting, then Running again."""


def _suspended(job: dict) -> bool:
    return bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def _condition_true(job: dict, kind: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


class FakeOperator(FakeController):
    pod_label = JOB_LABEL
    container = "pytorch"

    def __init__(self, server: FakeKubeApiServer, default: JobPlan | None = None) -> None:
        super().__init__(server, default or JobPlan())
        server.operator = self

    # -- hooks called by the apiserver ---------------------------------------------------------
    def job_created(self, job: dict) -> None:
        name = job["metadata"]["name"]
        self._admit(name)
        if _suspended(job):  # created suspended (for Kueue): no pods until it is admitted
            namespace = job["metadata"]["namespace"]
            self._condition(name, namespace, "Created", "PyTorchJobCreated", "created")
            self._condition(name, namespace, "Suspended", "PyTorchJobSuspended", "suspended")
            return
        self._start(job)

    def job_patched(self, job: dict) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        suspended, running = _suspended(job), self._running(name)
        if not suspended and not running:
            # Unsuspended (Kueue admitted it): pods again; the trainer resumes.
            if name in self._plans_in_use and _condition_true(job, "Suspended"):
                self._condition(
                    name, namespace, "Suspended", "PyTorchJobResumed", "resumed", true=False
                )
                self._start(job)
        elif suspended and running:
            self._stop(self._runs[name])
            self._delete_pods(name, namespace)
            self._condition(name, namespace, "Suspended", "PyTorchJobSuspended", "suspended")

    # -- the simulation ------------------------------------------------------------------------
    def _run(self, job: dict, plan: JobPlan, stop: threading.Event) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        self._condition(name, namespace, "Created", "PyTorchJobCreated", "created")
        pods = self._create_pods(job)
        if stop.wait(plan.step_seconds):
            return
        for pod in pods:
            self._set_phase(pod, namespace, "Running")
        self._condition(name, namespace, "Running", "PyTorchJobRunning", "running")
        step = 0
        while step < plan.steps or plan.hold:
            step += 1
            if stop.is_set():
                return
            for pod in pods:
                self._log(pod, namespace, f"step {step} loss {4.0 / step:.3f}")
            if plan.kill_pod_at == step:
                self._restart_pod(job, pods[0], namespace)
            if plan.lose_node_at == step and len(pods) > 1:
                self._restart_pod(job, pods[1], namespace, "Worker", 0)
            if stop.wait(plan.step_seconds):
                return
        if stop.is_set():
            return
        phase = "Succeeded" if plan.outcome == "Succeeded" else "Failed"
        for pod in pods:
            self._set_phase(pod, namespace, phase)
            self._closed.add(self._uid(pod, namespace))
        reason = f"PyTorchJob{phase}"
        message = "completed" if phase == "Succeeded" else "master-0 exited with code 1"
        self._condition(name, namespace, phase, reason, message)

    def _create_pods(self, job: dict) -> list[str]:
        name = job["metadata"]["name"]
        specs = job["spec"].get("pytorchReplicaSpecs", {})
        names = []
        for replica_type in ("Master", "Worker"):
            for index in range(int((specs.get(replica_type) or {}).get("replicas", 0))):
                pod_name = f"{name}-{replica_type.lower()}-{index}"
                self._put_pod(job, pod_name, replica_type, index)
                names.append(pod_name)
        return names

    def _put_pod(self, job: dict, pod_name: str, replica_type: str, index: int) -> None:
        meta = job["metadata"]
        pod = {
            "apiVersion": "v1",
            "metadata": {
                "name": pod_name,
                "labels": {
                    JOB_LABEL: meta["name"],
                    "training.kubeflow.org/replica-type": replica_type.lower(),
                    "training.kubeflow.org/replica-index": str(index),
                },
                "ownerReferences": [
                    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": meta["name"]}
                    | {"uid": meta["uid"], "controller": True}
                ],
            },
            "spec": {"containers": [{"name": "pytorch", "image": "trainer"}]},
            "status": {"phase": "Pending"},
        }
        self.server.put("pods", pod, meta["namespace"])

    def _restart_pod(
        self, job: dict, pod_name: str, namespace: str, replica: str = "Master", index: int = 0
    ) -> None:
        job_name = job["metadata"]["name"]
        old = self.server.remove("pods", pod_name, namespace)
        if old:
            self._closed.add(old["metadata"]["uid"])
        self._condition(job_name, namespace, "Restarting", "PyTorchJobRestarting", "pod killed")
        self._put_pod(job, pod_name, replica, index)
        self._set_phase(pod_name, namespace, "Running")
        self._log(pod_name, namespace, "resumed from latest checkpoint")
        self._condition(job_name, namespace, "Running", "PyTorchJobRunning", "running")

    def _condition(
        self, name: str, namespace: str, kind: str, reason: str, message: str, true: bool = True
    ) -> None:
        """Append a condition the way the operator does (Running flips off when it ends).
        Suspending turns Running off with the suspension's reason, resuming turns Suspended
        off with reason PyTorchJobResumed (kubeflow/training-operator v1.9.4,
        pkg/controller.v1/common/job.go, ReconcileJobs)."""

        def mutate(job: dict) -> None:
            status = job.setdefault("status", {})
            conditions = status.setdefault("conditions", [])
            for cond in conditions:
                if cond["type"] == kind:
                    conditions.remove(cond)
                    break
            for cond in conditions:
                if cond["type"] in ("Running", "Restarting") and kind != "Created":
                    if kind == "Suspended" and cond["status"] == "True":
                        cond["reason"] = reason
                    cond["status"] = "False"
                if cond["type"] == "Suspended" and kind == "Running":
                    cond["status"] = "False"
            conditions.append(
                {"type": kind, "status": "True" if true else "False", "reason": reason}
                | {"message": message}
                | {"lastUpdateTime": now(), "lastTransitionTime": now()}
            )
            if kind == "Running":
                status.setdefault("startTime", now())
            if kind in ("Succeeded", "Failed"):
                status["completionTime"] = now()

        job = self.server.update("pytorchjobs", name, namespace, mutate)
        if job is not None and self.server.kueue is not None:
            self.server.kueue.job_status_changed(job)  # Kueue's PodsReady reads Running
