"""KubeRay on the local cluster: `finish` ends a RayJob run's submitter pod only (the
driver's outcome; the head and workers are its Ray cluster), other runs' pods as before;
Kueue's Configuration integrates RayJobs (once, whatever infra's lists); KubeRay's CRDs come
from its module; the operator starts with the dashboard stand-in as its HTTP proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster import cluster, manifests
from localcluster.cluster import EXIT_CODE_ANNOTATION, end_run
from localcluster.versions import KUBERAY, KUEUE
from testing_support.kube_listing import (
    RecordedKube,
    pod,
    ray_node_pod,
    raycluster,
    rayjob,
    submitter_job,
    submitter_pod,
)

KUBERAY_MODULE = (
    Path.home() / "go/pkg/mod/github.com/ray-project/kuberay" / (f"ray-operator@{KUBERAY.version}")
)


def ray_run(run_id: str, name: str, *submitters: str) -> list[dict]:
    owner = rayjob(name, run_id)
    ray_cluster = raycluster(owner)
    job = submitter_job(owner)
    return [
        owner,
        ray_cluster,
        job,
        ray_node_pod(ray_cluster, "head", 0, run_id),
        ray_node_pod(ray_cluster, "worker", 0, run_id),
        ray_node_pod(ray_cluster, "worker", 1, run_id),
        *(
            submitter_pod(job, f"p{i}", phase, run_id, created=f"2026-01-01T00:0{i}:00Z")
            for i, phase in enumerate(submitters)
        ),
    ]


def test_finish_a_rayjob_run_ends_its_submitter_only():
    objects = ray_run("run-1", "job-a", "Failed", "Running") + ray_run("run-2", "job-b", "Running")
    # A pod labelled as job-a's submitter but not the Job's (a Job of that name before).
    stale = rayjob("job-a", "run-1")
    objects.append(
        submitter_pod(
            submitter_job(stale), "old", "Running", "run-1", created="2025-12-31T00:00:00Z"
        )
    )
    kube = RecordedKube(objects)
    assert end_run(kube, "run-1", 3) == ["job-a-p1"]
    assert kube.annotated == [("training", "job-a-p1", {EXIT_CODE_ANNOTATION: "3"})]


def test_finish_another_run_ends_all_its_running_pods():
    master = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "training", "uid": "u-1"},
    }
    labels = {"trainstack.io/run-id": "run-9"}
    kube = RecordedKube(
        [
            *ray_run("run-1", "job-a", "Running"),
            pod("pt-master-0", master, "Running", labels=labels),
            pod("pt-worker-0", master, "Running", labels=labels),
            pod("pt-worker-1", master, "Succeeded", labels=labels, exit_code=0),
        ]
    )
    assert sorted(end_run(kube, "run-9", 0)) == ["pt-master-0", "pt-worker-0"]
    assert {name for _, name, _ in kube.annotated} == {"pt-master-0", "pt-worker-0"}


def test_kueue_integrates_rayjobs_once(tmp_path, monkeypatch):
    state = cluster.State(tmp_path, ports={KUEUE.name: 9443})

    def frameworks() -> list[str]:
        path = cluster._controller_config(KUEUE, state, tmp_path)
        import yaml

        return yaml.safe_load(path.read_text())["integrations"]["frameworks"]

    got = frameworks()
    assert "ray.io/rayjob" in got and "batch/job" in got
    assert "trainer.kubeflow.org/trainjob" in got and "kubeflow.org/pytorchjob" in got

    # Once infra's manager_config lists RayJobs itself (ray_jobs=True): still one entry.
    real = cluster.manager_config

    def with_ray(operator: str) -> dict:
        config = real(operator)
        config["integrations"]["frameworks"].append("ray.io/rayjob")
        return config

    monkeypatch.setattr(cluster, "manager_config", with_ray)
    assert sorted(frameworks()) == sorted(got)


@pytest.mark.skipif(not KUBERAY_MODULE.is_dir(), reason="KubeRay's module is not downloaded")
def test_kuberay_crds_from_its_module():
    crds = manifests.crds(KUBERAY, KUBERAY_MODULE, 0, b"")
    assert sorted(crd["metadata"]["name"] for crd in crds) == [
        "rayclusters.ray.io",
        "rayjobs.ray.io",
        "rayservices.ray.io",
    ]
    assert all("conversion" not in crd["spec"] for crd in crds)
    assert manifests.webhook_configurations(KUBERAY, KUBERAY_MODULE, 0, b"") == []


def test_the_operator_starts_behind_the_stand_in(tmp_path, monkeypatch):
    state = cluster.State(tmp_path, ports={cluster.RAY_DASHBOARD: 41234})
    state.logs.mkdir()
    started: list[tuple[str, list[str], dict]] = []
    monkeypatch.setattr(
        cluster, "_spawn", lambda st, name, binary, argv, env, *_: started.append((name, argv, env))
    )
    monkeypatch.setattr(
        cluster,
        "_start",
        lambda st, name, component, argv, env, *_: started.append((name, argv, env)),
    )
    monkeypatch.setattr(cluster, "_wait_ready", lambda *args, **kwargs: None)
    cluster._start_kuberay(state)
    (dashboard, dashboard_argv, dashboard_env), (operator, argv, env) = started
    assert dashboard == "ray-dashboard" and operator == "kuberay"
    assert dashboard_argv[1:3] == ["-m", "localcluster.ray_dashboard"]
    assert "--port=41234" in dashboard_argv
    # This tree's localcluster, whatever the venv has installed.
    assert dashboard_env["PYTHONPATH"].split(":")[0] == str(cluster.REPO)
    assert f"--kubeconfig={state.kubeconfig}" in dashboard_argv
    assert argv == [
        "kuberay-operator",
        "--metrics-addr=0",
        "--health-probe-bind-address=0",
        "--enable-leader-election=false",
    ]
    assert env["HTTP_PROXY"] == "http://127.0.0.1:41234"
    assert set(env["NO_PROXY"].split(",")) == {"127.0.0.1", "localhost"}
    assert env["KUBECONFIG"] == str(state.kubeconfig)
    assert "ENABLE_WEBHOOKS" not in env and "--use-kubernetes-proxy" not in argv
