"""The real local control plane (`localcluster`) for the e2e suite and the benchmarks that run
against it: started in a folder of the caller's (`running_cluster`), with its stack's run dirs on
a moto S3 server, and stopped after, every process by its id; `Cluster` is it and trainstack
pointed at it. tests/e2e/conftest.py starts one per pytest session with it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes.dynamic.exceptions import NotFoundError

from jobs.spec import LABEL_PREFIX
from localcluster import cluster
from localcluster.objects import BUCKET, STACK
from testing_support.s3_server import MotoS3, s3_env

TRAINSTACK = Path(sys.executable).with_name("trainstack")
CHECKOUT = Path(__file__).resolve().parents[1]
CHECKOUT_ENV = {
    "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
}
"""The commands run this checkout's code, whichever checkout the venv was installed from."""
NAMESPACE = "training"


@dataclass
class Cluster:
    """The running local cluster, and trainstack pointed at it."""

    state: cluster.State
    config_dir: Path
    workdir: Path
    client: object
    env: dict[str, str]
    """boto3's environment for moto, given to every trainstack command."""

    @property
    def command_env(self) -> dict[str, str]:
        """The environment every trainstack command here runs with."""
        return {
            **os.environ,
            **self.env,
            **CHECKOUT_ENV,
            "TRAINSTACK_CONFIG_PATH": str(self.config_dir),
            "KUBECONFIG": str(self.state.kubeconfig),
        }

    def spawn(self, *args: str) -> subprocess.Popen:
        """`trainstack ARGS` started, not waited for (a follower): its stdout and stderr
        together on a text pipe, unbuffered, so each line arrives when it is printed."""
        return subprocess.Popen(
            [str(TRAINSTACK), *args],
            cwd=self.workdir,
            env={**self.command_env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def trainstack(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        done = subprocess.run(
            [str(TRAINSTACK), *args],
            cwd=self.workdir,
            env=self.command_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"trainstack {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done.stdout + done.stderr

    def launch(self, *args: str, check: bool = True) -> str:
        return self.trainstack("launch", f"stack={STACK}", "backend=kubernetes", *args, check=check)

    def resource(self, api_version: str, kind: str):
        return self.client.resources.get(api_version=api_version, kind=kind)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = NAMESPACE):
        return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()

    def items(self, api_version: str, kind: str, selector: str = "", namespace=NAMESPACE):
        listed = self.resource(api_version, kind).get(namespace=namespace, label_selector=selector)
        return [item.to_dict() for item in listed.items]

    def finish(self, run_id: str, exit_code: int) -> list[str]:
        return cluster.finish(self.state.directory, run_id, exit_code)

    def start_step(self, pod: dict) -> int | None:
        """What `pod`'s container does before its program, done here (kwok runs no container):
        the rendered command up to its first `--` (`trainer.pod_starts`, a PyTorchJob's pods
        only; None for pods without it), run with the pod's own env as the API server holds
        it, its downward-API fields resolved from the pod, and moto's S3. The program after
        `--` is a stand-in that exits 0: the step's exit code (0: the program would start)."""
        for container in pod["spec"]["containers"]:
            command = container.get("command") or []
            if command[:3] == ["python", "-m", "trainer.pod_starts"]:
                break
        else:
            return None
        step = [sys.executable, *command[1 : command.index("--") + 1]]
        env = {"PATH": os.environ["PATH"], **self.env, **pod_env(pod, container)}
        done = subprocess.run(
            [*step, sys.executable, "-c", "pass"],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        print(f"{pod['metadata']['name']}: {' '.join(command[:5])} -> {done.returncode}")
        print(done.stderr.strip())
        return done.returncode


def pod_env(pod: dict, container: dict) -> dict[str, str]:
    """The container's env as the kubelet would give it: values, and the downward API's pod
    name, namespace and annotations (an annotation the pod lacks: empty, as the kubelet gives
    it; any other reference fails the test: resolve it here first)."""
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
    }
    for key, value in (pod["metadata"].get("annotations") or {}).items():
        fields[f"metadata.annotations['{key}']"] = value
    env = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]
        annotation = path.startswith("metadata.annotations[")
        env[var["name"]] = fields.get(path, "") if annotation else fields[path]
    return env


RUN_ID_LABEL = f"{LABEL_PREFIX}/run-id"
KUEUE_API = "kueue.x-k8s.io/v1beta1"
JOBS = {
    "trainjob": ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob"),
}
"""job.api -> the job object's apiVersion and kind: the kinds the built-in trainer runs as."""
ALL_JOBS = {**JOBS, "rayjob": ("ray.io/v1", "RayJob")}
"""Every kind a run can be (a RayJob runs Ray programs only: tests/e2e/test_e2e_rayjob.py)."""


def conditions(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def workload_of(cluster, kind: str, name: str) -> dict | None:
    for workload in cluster.items(KUEUE_API, "Workload"):
        owners = workload["metadata"].get("owner_references") or workload["metadata"].get(
            "ownerReferences", []
        )
        if any(o["kind"] == kind and o["name"] == name for o in owners):
            return workload
    return None


def eventually(
    check: Callable[[], object],
    what: str,
    timeout: float = 60.0,
    describe: Callable[[], object] | None = None,
):
    """Poll `check` until it returns something truthy; fail naming `what` and its last value."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    seen = describe() if describe else last
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; saw: {seen!r}")


@contextlib.contextmanager
def running_cluster(root: Path, moto_s3: MotoS3) -> Iterator[Cluster]:
    """The cluster, its state and config under `root`, and its stack file with the run dirs on
    `moto_s3` (a job on more than one node needs a shared storage.root, as on EKS); trainstack
    gets moto's env. Stopped on the way out: every process it started gone, its state removed
    (an AssertionError names what was left)."""
    state_dir, config_dir = root / "state", root / "config"
    started = time.monotonic()
    state = None
    try:
        state = cluster.up(state_dir, config_dir / "stack")
        print(f"\nlocalcluster up in {time.monotonic() - started:.0f}s")
        workdir = root / "work"
        workdir.mkdir()
        moto_s3.client().create_bucket(Bucket=BUCKET)
        stack_file = Path(state.stack_file)
        stack = yaml.safe_load(stack_file.read_text())
        stack["storage"]["root"] = f"s3://{BUCKET}/runs"
        stack_file.write_text("# @package _global_\n" + yaml.safe_dump(stack, sort_keys=False))
        yield Cluster(state, config_dir, workdir, cluster._client(state), s3_env(moto_s3.url))
    finally:
        started_state = cluster.State.load(state_dir) or state
        cluster.down(state_dir)
        if started_state:
            left = [
                n
                for n, pid in started_state.pids.items()
                if cluster._runs(pid, started_state.binaries[n])
            ]
            assert not left, f"localcluster left {left} running"
        assert not state_dir.exists()


def remove_jobs(
    cluster: Cluster, api_version: str, kind: str, names: set[str], timeout: float = 180
) -> None:
    """Delete the `kind` jobs named `names` at once, then wait for their pods to go and their
    Workloads (Kueue's finalizer goes after the job): what runs next starts with an empty
    queue, not these being deleted ahead of it."""
    for name in names:
        with contextlib.suppress(NotFoundError):
            cluster.resource(api_version, kind).delete(
                name=name, namespace=NAMESPACE, body={"propagationPolicy": "Background"}
            )
    eventually(
        lambda: (
            not [
                p
                for p in cluster.items("v1", "Pod")
                if (p["metadata"].get("labels") or {}).get(RUN_ID_LABEL) in names
            ]
        ),
        f"the pods of {len(names)} {kind}s gone",
        timeout=timeout,
    )
    eventually(
        lambda: (
            not [
                w
                for w in cluster.items(KUEUE_API, "Workload")
                if {o.get("name") for o in w["metadata"].get("ownerReferences") or []} & names
            ]
        ),
        f"the Workloads of {len(names)} {kind}s gone",
        timeout=timeout,
    )
