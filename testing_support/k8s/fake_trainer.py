"""Kubeflow Trainer v2 and JobSet, simulated inside the fake apiserver (test-only).

Admission is the real schema: a TrainJob is checked against Trainer v2.3.0's vendored CRD
(testing_support/crd_schema.py, strictly) and must name a ClusterTrainingRuntime that exists, else
the create is refused 422 as the webhook would. A created TrainJob gets a JobSet of the same name
(owned by it) and, unless suspended, one pod per node (owned by the JobSet) labelled as JobSet
labels them (jobset name, replicated job `node`, completion index = node rank, restart
attempt). What then happens is scripted per name with `TrainPlan`s (one per submission):
steps with log lines; a node's pod failing with an exit code, which the runtime's failure policy
decides (1-127: the pod failure policy fails the Job and the JobSet at once; else the JobSet
recreates every pod, up to the runtime's `maxRestarts`, counting `status.restarts`);
completion (Complete) or failure (Failed), with the reasons and messages Trainer copies from
its JobSet's conditions (FailJobSetFailurePolicyAction, ReachedMaxRestarts, AllJobsCompleted).
Suspending the TrainJob (Kueue preempts, trainstack cancels) deletes the pods; un-suspending
(Kueue admits) starts them again. Deleting the TrainJob deletes the JobSet and the pods by
owner references.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

from testing_support import crd_schema
from testing_support.k8s.fake_apiserver import FakeKubeApiServer
from testing_support.k8s.fake_pods import FakeController, Plan, now

JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
RESERVED_ENV = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR"} | {
    "PET_MASTER_PORT"
}
PERMANENT = range(1, 128)
"""trainstack's runtimes fail the Job on these exit codes (its pod failure policy)."""
# A TrainJob's Complete/Failed condition is its JobSet's, type renamed, reason and message kept
# (kubeflow/trainer v2.3.0, pkg/runtime/framework/plugins/jobset/jobset.go, `Status`). JobSet's
# reasons and messages: kubernetes-sigs/jobset v0.12.0, pkg/constants/constants.go, set in
# pkg/controllers/failure_policy.go (a matching FailJobSet rule; maxRestarts reached, with
# `messageWithFirstFailedJob`) and pkg/controllers/jobset_controller.go (all jobs completed).
FAIL_JOBSET = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
COMPLETED = ("AllJobsCompleted", "jobset completed successfully")


@dataclass
class TrainPlan(Plan):
    fail_at: int | None = None
    """At this step node rank `fail_rank`'s pod exits with `exit_code`..."""
    fail_rank: int = 0
    exit_code: int = 137
    failures: int = 1
    """...in this many attempts in a row (the JobSet's restarts)."""


class FakeTrainer(FakeController):
    pod_label = JOBSET_LABEL
    container = "node"

    def __init__(self, server: FakeKubeApiServer, default: TrainPlan | None = None) -> None:
        super().__init__(server, default or TrainPlan())
        crd_schema.errors({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"})
        # (compiles the CRD's validator now, not inside a create with the client waiting)
        server.trainer = self

    # -- hooks called by the apiserver ---------------------------------------------------------
    def admission_error(self, job: dict) -> str | None:
        """What Trainer's CRD schema or webhook refuses about a new TrainJob, or None."""
        problems = crd_schema.errors({**job, "metadata": {**job["metadata"]}})
        if problems:
            return "; ".join(problems)
        runtime = job["spec"]["runtimeRef"]["name"]
        if self.server.get("clustertrainingruntimes", runtime) is None:
            return f'spec.runtimeRef: ClusterTrainingRuntime "{runtime}" not found'
        # The torch plugin's and the JobSet plugin's webhook rules (Trainer v2.3.0).
        env = {e["name"] for e in (job["spec"].get("trainer") or {}).get("env") or []}
        if env & RESERVED_ENV:
            return f"spec.trainer.env: must not have reserved envs: {sorted(env & RESERVED_ENV)}"
        for patch in job["spec"].get("runtimePatches") or []:
            template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
            for rjob in (template.get("spec") or {}).get("replicatedJobs") or []:
                pod = rjob.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
                if any(c.get("env") for c in pod.get("containers") or []):
                    return "spec.runtimePatches: must not have envs for the node container"
        return None

    def job_created(self, job: dict) -> None:
        meta = job["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        self._admit(name)
        self.server.put(
            "jobsets",
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "metadata": {
                    "name": name,
                    "labels": dict(meta.get("labels") or {}),
                    "ownerReferences": [_owner("trainer.kubeflow.org/v1alpha1", "TrainJob", meta)],
                },
                "spec": {"suspend": bool(job["spec"].get("suspend"))},
                "status": {"restarts": 0},
            },
            namespace,
        )
        if job["spec"].get("suspend"):
            self._condition(name, namespace, "Suspended", True, "Suspended", "suspended")
            return
        self._start(job)

    def job_patched(self, job: dict) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        suspended, running = bool(job["spec"].get("suspend")), self._running(name)
        if suspended and running:
            self._stop(self._runs[name])
            self._delete_pods(name, namespace)
            self._active(name, namespace, 0)
            self._condition(name, namespace, "Suspended", True, "Suspended", "suspended")
        elif not suspended and not running and name in self._plans_in_use:
            if self._final(job):
                return
            self._condition(name, namespace, "Suspended", False, "Resumed", "resumed")
            self._start(job)

    # -- what happens once a TrainJob has ended -------------------------------------------------
    def jobset_ttl_passed(self, name: str, namespace: str = "training") -> None:
        """JobSet's TTL controller, once the runtime's `ttlSecondsAfterFinished` has passed
        after the JobSet finished: the JobSet and its pods are deleted. Nothing when the
        runtime sets no TTL."""
        job = self.server.get("trainjobs", name, namespace)
        runtime = self.server.get("clustertrainingruntimes", job["spec"]["runtimeRef"]["name"])
        template = ((runtime or {}).get("spec") or {}).get("template", {}).get("spec", {})
        if template.get("ttlSecondsAfterFinished") is None:
            return
        self._delete_pods(name, namespace)
        self.server.remove("jobsets", name, namespace)

    def reconcile(self, name: str, namespace: str = "training") -> None:
        """One pass of Trainer's TrainJob reconciler (kubeflow/trainer v2.3.0,
        pkg/controller/trainjob_controller.go): a Failed condition is cleared unless its reason
        is DeadlineExceeded; a job not then finished (Complete or Failed) has its JobSet applied,
        a missing one created anew (its pods start); then the status is read back from the
        JobSet (plugins/jobset/jobset.go `Status`: a Failed JobSet fails the TrainJob again)."""
        job = self.server.get("trainjobs", name, namespace)
        conditions = (job.get("status") or {}).get("conditions") or []
        deadline = any(
            c["type"] == "Failed" and c.get("reason") == "DeadlineExceeded" for c in conditions
        )
        if deadline or any(c["type"] == "Complete" and c["status"] == "True" for c in conditions):
            return
        if self.server.get("jobsets", name, namespace) is not None:
            return  # applied again unchanged: still Failed, as its JobSet says
        self.server.update(
            "trainjobs",
            name,
            namespace,
            lambda j: j["status"].update(
                conditions=[c for c in j["status"]["conditions"] if c["type"] != "Failed"]
            ),
        )
        self.job_created(self.server.get("trainjobs", name, namespace))

    # -- the simulation ------------------------------------------------------------------------
    def _max_restarts(self, job: dict) -> int:
        runtime = self.server.get("clustertrainingruntimes", job["spec"]["runtimeRef"]["name"])
        policy = ((runtime or {}).get("spec") or {}).get("template", {}).get("spec", {})
        return int((policy.get("failurePolicy") or {}).get("maxRestarts") or 0)

    def _run(self, job: dict, plan: TrainPlan, stop: threading.Event) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        nodes = int(job["spec"]["trainer"].get("numNodes") or 1)
        jobset = self.server.get("jobsets", name, namespace) or {}
        restarts = int((jobset.get("status") or {}).get("restarts") or 0)
        failures_left = plan.failures if restarts == 0 else max(plan.failures - restarts, 0)
        while True:
            pods = [self._put_pod(job, rank, restarts) for rank in range(nodes)]
            if stop.wait(plan.step_seconds):
                return
            for pod in pods:
                self._set_phase(pod, namespace, "Running")
            self._active(name, namespace, nodes)
            step, failed_code = 0, None
            while step < plan.steps or plan.hold:
                step += 1
                if stop.is_set():
                    return
                for pod in pods:
                    self._log(pod, namespace, f"step {step} loss {4.0 / step:.3f}")
                if plan.fail_at == step and failures_left > 0:
                    failures_left -= 1
                    failed_code = plan.exit_code
                    break
                if stop.wait(plan.step_seconds):
                    return
            if stop.is_set():
                return
            if failed_code is None:
                break
            failed = pods[plan.fail_rank]
            self._set_phase(failed, namespace, "Failed", failed_code)
            self._closed.add(self._uid(failed, namespace))
            if failed_code in PERMANENT:
                return self._end(job, pods, "Failed", FAIL_JOBSET)
            if restarts >= self._max_restarts(job):
                return self._end(job, pods, "Failed", MAX_RESTARTS)
            restarts += 1  # the JobSet recreates every node's pod
            self._delete_pods(name, namespace)
            count = restarts
            self.server.update(
                "jobsets", name, namespace, lambda js, n=count: js["status"].update(restarts=n)
            )
        # A plan's plain failure is the trainer's exit 1: the runtime's FailJobSet rule.
        if plan.outcome == "Succeeded":
            self._end(job, pods, "Complete", COMPLETED)
        else:
            self._end(job, pods)

    def _end(
        self, job: dict, pods: list[str], kind: str = "Failed", why: tuple = FAIL_JOBSET
    ) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        phase = "Succeeded" if kind == "Complete" else "Failed"
        for pod in pods:
            if (self.server.get("pods", pod, namespace) or {}).get("status", {}).get(
                "phase"
            ) != "Failed":
                self._set_phase(pod, namespace, phase)
            self._closed.add(self._uid(pod, namespace))
        # As on the real control plane: the ended pods are counted nowhere for a moment before
        # the condition comes (jobs.backends.kubernetes.client.state `went_back`).
        self._active(name, namespace, 0)
        reason, message = why
        if kind == "Failed":  # JobSet names the first failed Job: `<jobset>-<rjob>-<index>`
            message = f"{message} (first failed job: {name}-node-0)"
        self._condition(name, namespace, kind, True, reason, message)
        self._active(name, namespace, 0)

    def _put_pod(self, job: dict, rank: int, attempt: int) -> str:
        meta = job["metadata"]
        jobset = self.server.get("jobsets", meta["name"], meta["namespace"])
        pod_name = f"{meta['name']}-node-0-{rank}-{uuid.uuid4().hex[:5]}"
        patch = job["spec"].get("runtimePatches") or [{}]
        template = patch[0].get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {})
        rjob = (template.get("replicatedJobs") or [{}])[0]
        labels = dict(
            (
                rjob.get("template", {}).get("spec", {}).get("template", {}).get("metadata") or {}
            ).get("labels")
            or {}
        )
        labels |= {
            JOBSET_LABEL: meta["name"],
            RJOB_LABEL: "node",
            "jobset.sigs.k8s.io/job-index": "0",
            INDEX_LABEL: str(rank),
            ATTEMPT_LABEL: str(attempt),
        }
        pod = {
            "apiVersion": "v1",
            "metadata": {
                "name": pod_name,
                "labels": labels,
                "ownerReferences": [
                    _owner("jobset.x-k8s.io/v1alpha2", "JobSet", jobset["metadata"])
                ],
            },
            "spec": {"containers": [{"name": "node", "image": job["spec"]["trainer"]["image"]}]},
            "status": {"phase": "Pending"},
        }
        self.server.put("pods", pod, meta["namespace"])
        return pod_name

    def _active(self, name: str, namespace: str, active: int) -> None:
        def mutate(job: dict) -> None:
            job.setdefault("status", {})["jobsStatus"] = [
                {"name": "node", "active": active, "ready": active, "failed": 0, "succeeded": 0}
                | {"suspended": 0}
            ]

        job = self.server.update("trainjobs", name, namespace, mutate)
        if job is not None and self.server.kueue is not None:
            self.server.kueue.job_status_changed(job)  # Kueue's PodsReady reads jobsStatus

    @staticmethod
    def _final(job: dict) -> bool:
        conditions = (job.get("status") or {}).get("conditions") or []
        return any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions
        )

    def _condition(
        self, name: str, namespace: str, kind: str, status: bool, reason: str, message: str
    ) -> None:
        """Set a metav1.Condition (one per type), as Trainer does."""

        def mutate(job: dict) -> None:
            conditions = job.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c["type"] != kind]
            conditions.append(
                {"type": kind, "status": "True" if status else "False", "reason": reason}
                | {"message": message, "lastTransitionTime": now()}
            )

        self.server.update("trainjobs", name, namespace, mutate)


def _owner(api_version: str, kind: str, meta: dict) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
