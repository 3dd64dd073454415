"""The `batch/v1` Job controller, simulated inside the fake apiserver (test-only).

For an Indexed Job it runs every index as a real local subprocess of the pod's command (for
`data prepare`: `python -m trainer.data.prepare ...`) with `JOB_COMPLETION_INDEX` set, at most
`parallelism` at a time, against whatever S3 `env` points at (moto). A failed index is retried
alone up to `backoffLimitPerIndex` times; an exit code listed by a `FailIndex` rule of
`podFailurePolicy` fails the index at once. Pods (`<job>-<index>-<attempt>`) and the Job's
status (active/succeeded/failed, completedIndexes/failedIndexes, Complete/Failed conditions)
are written as the real controller writes them. `sabotage` kills an index's pod (SIGKILL, as a
lost node or the OOM killer would) once it has written its first object under `watch_prefix`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from testing_support.k8s.fake_apiserver import FakeKubeApiServer

REPO = Path(__file__).resolve().parents[2]
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@dataclass
class Attempt:
    index: int
    attempt: int
    exit_code: int
    committed_after: bool
    """Whether the dataset's manifest existed once this attempt ended."""
    stderr: str


@dataclass
class FakeBatchController:
    server: FakeKubeApiServer
    env: dict[str, str]
    committed: object = None
    """A callable: does the output's manifest exist now (recorded after every attempt)."""
    objects_under: object = None
    """A callable: how many objects the output holds (to time a sabotage)."""
    sabotage: dict[int, int] = field(default_factory=dict)
    """Index -> how many of its first attempts to kill mid-write."""
    attempts: list[Attempt] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _procs: set[subprocess.Popen] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _killed: set[int] = field(default_factory=set)
    _baseline: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.server.batch = self

    # -- hook called by the apiserver -----------------------------------------------------
    def job_created(self, job: dict) -> None:
        thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        self._threads.append(thread)
        thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        for proc in list(self._procs):
            _kill_group(proc)
        for thread in self._threads:
            thread.join(timeout=30)

    def wait_idle(self, timeout: float = 120) -> None:
        for thread in self._threads:
            thread.join(timeout=timeout)

    # -- the simulation -------------------------------------------------------------------
    def _run(self, job: dict) -> None:
        spec = job["spec"]
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        completions, parallelism = spec["completions"], spec.get("parallelism", 1)
        retries = spec.get("backoffLimitPerIndex", 6)
        fail_now = {
            code
            for rule in (spec.get("podFailurePolicy") or {}).get("rules", [])
            if rule["action"] == "FailIndex"
            for code in rule["onExitCodes"]["values"]
        }
        container = spec["template"]["spec"]["containers"][0]
        pending, tries = list(range(completions)), dict.fromkeys(range(completions), 0)
        running: dict[int, tuple[subprocess.Popen, str]] = {}
        done, failed, failed_pods = set(), set(), 0
        while (pending or running) and not self._stop.is_set():
            while pending and len(running) < parallelism:
                index = pending.pop(0)
                tries[index] += 1
                running[index] = self._start(job, container, index, tries[index])
            self._status(name, namespace, len(running), done, failed, failed_pods)
            time.sleep(0.05)
            for index, (proc, pod) in list(running.items()):
                if self._sabotaged(index, tries[index], proc):
                    self._killed.add(proc.pid)
                    _kill_group(proc)  # the container: the pod and its worker processes
                if proc.poll() is None:
                    continue
                del running[index]
                self._procs.discard(proc)
                code = proc.returncode
                stderr = proc.stderr.read() if proc.stderr else ""
                self.attempts.append(
                    Attempt(index, tries[index], code, bool(self.committed()), stderr)
                )
                self._pod_phase(pod, namespace, code)
                if code == 0:
                    done.add(index)
                    continue
                failed_pods += 1
                if code in fail_now or tries[index] > retries:
                    failed.add(index)
                else:
                    pending.append(index)
        self._status(name, namespace, 0, done, failed, failed_pods, final=True)

    def _sabotaged(self, index: int, attempt: int, proc: subprocess.Popen) -> bool:
        if attempt > self.sabotage.get(index, 0) or proc.pid in self._killed:
            return False
        return self.objects_under() > self._baseline.get(index, 0)

    def _start(self, job: dict, container: dict, index: int, attempt: int):
        self._baseline[index] = self.objects_under() if self.objects_under else 0
        env = {**os.environ, **self.env, "JOB_COMPLETION_INDEX": str(index)}
        env.update({e["name"]: e["value"] for e in container.get("env", [])})
        command = [sys.executable if c == "python" else c for c in container["command"]]
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # one process group per pod, killed as a whole
        )
        self._procs.add(proc)
        meta = job["metadata"]
        pod = f"{meta['name']}-{index}-{attempt}"
        self.server.put(
            "pods",
            {
                "apiVersion": "v1",
                "metadata": {
                    "name": pod,
                    "labels": {"job-name": meta["name"], INDEX_LABEL: str(index)},
                    "ownerReferences": [
                        {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"]}
                        | {"uid": meta["uid"], "controller": True}
                    ],
                },
                "spec": {"containers": [{"name": container["name"], "image": container["image"]}]},
                "status": {"phase": "Running"},
            },
            meta["namespace"],
        )
        return proc, pod

    def _pod_phase(self, pod: str, namespace: str, code: int) -> None:
        phase = "Succeeded" if code == 0 else "Failed"
        exit_code = 128 - code if code < 0 else code  # killed by signal N: 128 + N
        terminated = {"terminated": {"exitCode": exit_code}}
        self.server.update(
            "pods",
            pod,
            namespace,
            lambda p: p["status"].update(
                phase=phase, containerStatuses=[{"name": "prepare", "state": terminated}]
            ),
        )

    def _status(self, name, namespace, active, done, failed, failed_pods, final=False) -> None:
        def mutate(job: dict) -> None:
            status = job.setdefault("status", {})
            status.update(
                active=active,
                succeeded=len(done),
                failed=failed_pods,
                completedIndexes=_ranges(done),
                failedIndexes=_ranges(failed),
            )
            if final:
                kind = "Failed" if failed else "Complete"
                status["conditions"] = [{"type": kind, "status": "True"}]

        self.server.update("jobs", name, namespace, mutate)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


def _ranges(indexes: set[int]) -> str:
    return ",".join(str(i) for i in sorted(indexes))
