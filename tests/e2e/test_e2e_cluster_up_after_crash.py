"""`make cluster-up` after a crash (issue 47, scenario 6): with the JobSet controller and kwok
killed (SIGKILL), `python -m localcluster up` on the same state folder restarts those two and
leaves every other process alone (same ids), on the same ports, with the cluster's objects and
a running job's pods as they were; a job launched after it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from localcluster import cluster
from localcluster.cluster import REPO
from localcluster.versions import JOBSET
from tests.e2e.conftest import eventually, pods_of, remove_run

KILLED = (JOBSET.name, "kwok")
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"
ONE_NODE = ("compute=p5.48xlarge", "compute.nodes=1", "job.api=trainjob")


def test_cluster_up_restarts_only_what_died(local_cluster):
    state = local_cluster.state
    state.refresh()
    stack_file = Path(state.stack_file)
    stack_text = stack_file.read_text()  # the session's (its storage on moto's S3)
    before, ports = dict(state.pids), dict(state.ports)
    kept, later = "e2e-up-kept", "e2e-up-later"
    try:
        local_cluster.launch(*ONE_NODE, f"run_id={kept}")
        kept_pods = eventually(
            lambda: {p["metadata"]["uid"] for p in pods_of(local_cluster, kept, "Running")},
            f"{kept} running",
        )
        job_uid = local_cluster.get(TRAINJOB_API, "TrainJob", kept)["metadata"]["uid"]
        killed = {name: cluster.kill(state, name) for name in KILLED}
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "localcluster",
                f"--state-dir={state.directory}",
                "up",
                f"--config-dir={local_cluster.config_dir}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        took = time.monotonic() - started
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        state.refresh()
        restarted = sorted(n for n in state.pids if state.pids[n] != before[n])
        assert restarted == sorted(KILLED), done.stdout
        assert all(cluster._alive(state, name) for name in state.pids)
        assert state.ports == ports
        for name, pid in killed.items():
            assert f"{name} (pid {pid}) had stopped" in done.stdout, done.stdout
        # The cluster's objects and the running job's pods are the ones from before.
        assert local_cluster.get(TRAINJOB_API, "TrainJob", kept)["metadata"]["uid"] == job_uid
        assert {p["metadata"]["uid"] for p in pods_of(local_cluster, kept, "Running")} == kept_pods
        local_cluster.finish(kept, 0)  # the restarted kwok ends its pod
        eventually(lambda: pods_of(local_cluster, kept, "Succeeded"), f"{kept}'s pod succeeded")
        local_cluster.launch(*ONE_NODE, f"run_id={later}")
        eventually(lambda: pods_of(local_cluster, later, "Running"), f"{later} running")
        figure = {
            "scenario": "cluster-up-after-crash",
            "killed": sorted(KILLED),
            "restarted": restarted,
            "kept": len(state.pids) - len(restarted),
            "up_s": round(took, 1),
        }
        print(f"e2e-figure: {json.dumps(figure)}")
    finally:
        stack_file.write_text(stack_text)  # `up` wrote the default one again
        state.refresh()
        for name in state.pids:
            if not cluster._alive(state, name):
                cluster.restart(state, name)
        remove_run(local_cluster, kept)
        remove_run(local_cluster, later)
