"""What the simulated controllers (fake_operator.py, fake_trainer.py) share: the per-name plan
queue, one thread per running job, and the pods they make (each pod's log, what the
apiserver's log endpoint serves, its status as the kubelet reports it, and when it ends).
Test-only."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from testing_support.k8s.fake_apiserver import FakeKubeApiServer


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Plan:
    """What a simulated job does (the controllers' plans add their faults)."""

    outcome: str = "Succeeded"
    """Final condition: Succeeded or Failed."""
    steps: int = 4
    """Log lines (training steps) each pod writes before the job ends."""
    step_seconds: float = 0.05
    hold: bool = False
    """Keep running after the last step until the job is suspended or deleted."""


@dataclass
class _Run:
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class FakeController:
    pod_label: str
    """The label naming the job a controller's pods belong to."""
    container: str
    """The name of the pods' one container."""

    def __init__(self, server: FakeKubeApiServer, default: Plan) -> None:
        self.server = server
        self.default = default
        self.plans: dict[str, list[Plan]] = {}
        """What happens to each job name, one plan per submission (else `default`)."""
        self.created: dict[str, int] = {}
        """Submissions per job name (what the tests count duplicates with)."""
        self._runs: dict[str, _Run] = {}
        self._plans_in_use: dict[str, Plan] = {}
        self._logs: dict[str, list[str]] = {}
        self._closed: set[str] = set()

    def _run(self, job: dict, plan: Plan, stop: threading.Event) -> None:
        raise NotImplementedError

    # -- hooks called by the apiserver ---------------------------------------------------------
    def _admit(self, name: str) -> None:
        """Count a submission and take its plan."""
        self.created[name] = self.created.get(name, 0) + 1
        queue = self.plans.get(name) or []
        self._plans_in_use[name] = queue.pop(0) if queue else self.default

    def job_deleted(self, name: str) -> None:
        self._stop(self._runs.pop(name, None))
        for pod in self.server.list("pods", selector={"labels": {self.pod_label: ("=", name)}}):
            self._closed.add(pod["metadata"]["uid"])

    def log_lines(self, pod_uid: str) -> list[str]:
        return list(self._logs.get(pod_uid, []))

    def log_closed(self, pod_uid: str) -> bool:
        return pod_uid in self._closed

    def shutdown(self) -> None:
        """Stop every simulated job (held ones included)."""
        for run in list(self._runs.values()):
            run.stop.set()
        self.wait_idle(timeout=2)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Block until every simulated job thread has finished."""
        for run in list(self._runs.values()):
            run.thread.join(timeout=timeout)

    # -- the simulation ------------------------------------------------------------------------
    def _start(self, job: dict) -> None:
        name = job["metadata"]["name"]
        run = _Run()
        run.thread = threading.Thread(
            target=self._run, args=(job, self._plans_in_use[name], run.stop), daemon=True
        )
        self._runs[name] = run
        run.thread.start()

    def _running(self, name: str) -> bool:
        run = self._runs.get(name)
        return run is not None and not run.stop.is_set()

    @staticmethod
    def _stop(run: _Run | None) -> None:
        if run and not run.stop.is_set():
            run.stop.set()
            if run.thread is not threading.current_thread():
                run.thread.join(timeout=5)

    def _delete_pods(self, job_name: str, namespace: str) -> None:
        selector = {"labels": {self.pod_label: ("=", job_name)}}
        for pod in self.server.list("pods", namespace, selector):
            self._closed.add(pod["metadata"]["uid"])
            self.server.remove("pods", pod["metadata"]["name"], namespace)

    def _uid(self, pod_name: str, namespace: str) -> str:
        pod = self.server.get("pods", pod_name, namespace)
        return pod["metadata"]["uid"] if pod else ""

    def _log(self, pod_name: str, namespace: str, line: str) -> None:
        uid = self._uid(pod_name, namespace)
        if uid:
            self._logs.setdefault(uid, []).append(f"[{pod_name}] {line}")
            with self.server.cond:
                self.server.cond.notify_all()

    def _set_phase(self, pod_name: str, namespace: str, phase: str, code: int | None = None):
        """Phase plus the container's status, as the kubelet reports it (a Failed pod exits 1
        unless `code` says otherwise)."""
        if phase == "Running":
            state = {"running": {"startedAt": now()}}
        else:
            if code is None:
                code = 0 if phase == "Succeeded" else 1
            state = {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed"}}
        container = {"name": self.container, "ready": phase == "Running", "restartCount": 0}
        container |= {"image": "trainer", "imageID": "", "state": state}  # the client's model
        self.server.update(
            "pods",
            pod_name,
            namespace,
            lambda p: p.setdefault("status", {}).update(phase=phase, containerStatuses=[container]),
        )
