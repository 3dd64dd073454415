"""The API as a security boundary (issue 23): a token runs approved jobs, nothing more.

Each attack reproduced on the old service is refused here with one 422 line, and nothing is
run, written or submitted: not on the cluster, not on the API host.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE, start_api


def files_under(path: Path) -> set[Path]:
    return {p for p in path.rglob("*")} if path.exists() else set()


def assert_nothing_happened(api, apiserver, before: set[Path], root: Path) -> None:
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    assert apiserver.list("configmaps", NAMESPACE) == []
    assert files_under(root) == before  # no run dir, manifests or checkpoint on the API host


def refused(response) -> str:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "\n" not in detail
    return detail


@pytest.mark.parametrize(
    "override",
    [
        "+model@backend=../backend/local",  # ran torchrun on the API host
        "+data@backend=../backend/render",  # wrote manifests on the API host
        "model=../backend/local",
        "+experiment=../backend/local",
        "model/../backend=local",
        "backend=local",
        "stack=none",
        "hydra.run.dir=/tmp/x",
        "+storage@_global_=local",
        "cluster.namespace=kube-system",
        "job.image_repository=docker.io/evil",
        "job.owner=bob",
    ],
)
def test_a_request_cannot_choose_where_or_how_things_run(api, apiserver, tmp_path, override):
    before = files_under(tmp_path)
    # The default compute (local_cpu): what the old service then ran with torchrun on its host.
    response = api.client.post("/v1/runs", json={"run_id": "atk1", "overrides": [override]})
    detail = refused(response)
    assert detail.split(":")[0] in override or detail.startswith("overrides[0]: not a Hydra")
    assert_nothing_happened(api, apiserver, before, tmp_path)


def test_option_paths_are_refused_without_saying_which_files_exist(api, apiserver, tmp_path):
    exists = tmp_path / "cluster.yaml"
    exists.write_text("# @package _global_\ncluster:\n  namespace: kube-system\n")
    missing = tmp_path / "nothing-here.yaml"
    before = files_under(tmp_path)
    answers = []
    for path in (exists, missing):
        for override in (f"+model@cluster={path}", f"model={path}"):
            response = api.client.post("/v1/runs", json={"overrides": [override]})
            answers.append(refused(response).replace(str(path), "PATH"))
        answers.append(refused(api.client.post("/v1/runs", json={"model": str(path)})))
        answers[-1] = answers[-1].replace(str(path), "PATH")
    assert answers[:3] == answers[3:]  # the same lines whether the file exists or not
    assert_nothing_happened(api, apiserver, before, tmp_path)


@pytest.mark.parametrize(
    "fields",
    [
        {"overrides": ["trainer.lr=${oc.env:HOME}"]},
        {"overrides": ["data.path='${oc.env:HOME}'"]},
        {"overrides": ["trainer.lr=[1,'${oc.env:HOME}']"]},
        {"model": "${oc.env:HOME}"},
        {"compute": "${oc.env:HOME}"},
        {"run_id": "${oc.env:HOME}"},
        {"image": "${oc.env:HOME}"},
        {"data": "s3://b/${oc.env:HOME}"},
        {"trainer": {"lr": "${oc.env:HOME}"}},
        {"overrides": ["job.image=${job.image_repository}:x"]},
    ],
)
def test_request_values_never_reach_a_resolver(api, apiserver, tmp_path, fields):
    home = os.environ.get("HOME") or "/root"
    before = files_under(tmp_path)
    for dryrun in ("false", "true"):
        response = api.client.post(
            f"/v1/runs?dryrun={dryrun}", json={**api.run_request("res1"), **fields}
        )
        detail = refused(response)
        assert "interpolations" in detail
        assert home not in response.text
    sweep = api.client.post(
        "/v1/sweeps", json={"overrides": ["trainer.lr=1,2"], "sweep_id": "${oc.env:HOME}"}
    )
    assert "sweep_id: interpolations" in refused(sweep) and home not in sweep.text
    assert_nothing_happened(api, apiserver, before, tmp_path)


def test_images_come_only_from_approved_registries(api, apiserver):
    for image in (
        "docker.io/evil/img:1",
        "evil/img:1",
        "registry.example.com.evil.io/trainer:v1",
        "registry.example.com:5000/trainer:v1",
    ):
        response = api.client.post("/v1/runs", json=api.run_request("img1", image=image))
        detail = refused(response)
        assert detail.startswith("job.image:") and "not from an approved registry" in detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    ok = api.client.post("/v1/runs", json=api.run_request("img2", image=IMAGE))
    assert ok.status_code == 201, ok.text


def test_the_stacks_repository_is_approved_and_cannot_be_changed(
    kubeconfig, token_dir, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the service's storage root (runs) holds the run dirs
    repository = "registry.internal.example/trainstack/trainer"
    server, api = start_api(
        kubeconfig, token_dir, tmp_path / "runs", overrides=(f"job.image_repository={repository}",)
    )
    try:
        ours = api.run_request("stk1", image=f"{repository}:abc123")
        assert api.client.post("/v1/runs", json=ours).status_code == 201
        theirs = api.run_request("stk2", image="docker.io/library/python:3.12")
        detail = refused(api.client.post("/v1/runs", json=theirs))
        assert "registry.internal.example" not in detail
        overrides = ["job.image_repository=docker.io/evil"]
        own = api.client.post("/v1/runs", json=api.run_request("stk3", overrides=overrides))
        assert refused(own).startswith("job.image_repository: not settable by a request")
    finally:
        api.client.close()
        server.stop()


def test_only_approved_secrets_are_mounted(kubeconfig, token_dir, tmp_path, apiserver, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the service's storage root (runs) holds the run dirs
    server, api = start_api(
        kubeconfig, token_dir, tmp_path / "runs", overrides=("cluster.approved_secrets=[hf-read]",)
    )
    try:
        for name in ("trainstack-api-token-hashes", "other-team-keys"):
            overrides = [f"job.secrets.hf_token.name={name}", "job.secrets.hf_token.key=token"]
            detail = refused(
                api.client.post("/v1/runs", json=api.run_request("sec1", overrides=overrides))
            )
            assert detail.startswith("job.secrets.hf_token.name:") and "not approved" in detail
        assert apiserver.list("pytorchjobs", NAMESPACE) == []
        overrides = ["job.secrets.hf_token.name=hf-read", "job.secrets.hf_token.key=token"]
        ok = api.client.post("/v1/runs", json=api.run_request("sec2", overrides=overrides))
        assert ok.status_code == 201, ok.text
        pod = apiserver.get("pytorchjobs", "sec2", NAMESPACE)["spec"]["pytorchReplicaSpecs"]
        env = pod["Master"]["template"]["spec"]["containers"][0]["env"]
        assert {"secretKeyRef": {"name": "hf-read", "key": "token"}} in [
            e.get("valueFrom") for e in env
        ]
    finally:
        api.client.close()
        server.stop()


def test_a_request_names_only_approved_priorities(
    kubeconfig, token_dir, tmp_path, apiserver, monkeypatch
):
    """A priority class outranking other teams' would let a token preempt their jobs."""
    monkeypatch.chdir(tmp_path)
    server, api = start_api(kubeconfig, token_dir, tmp_path / "runs", queue="team-q")
    try:  # no list in the service: none approved
        overrides = ["job.priority=urgent"]
        detail = refused(
            api.client.post("/v1/runs", json=api.run_request("pri1", overrides=overrides))
        )
        assert detail == (
            "job.priority: 'urgent' is not approved for jobs; allowed: none (leave job.priority "
            "unset)"
        )
    finally:
        api.client.close()
        server.stop()
    server, api = start_api(
        kubeconfig,
        token_dir,
        tmp_path / "runs",
        overrides=("cluster.approved_priorities=[normal]",),
        queue="team-q",
    )
    try:
        overrides = ["job.priority=urgent"]
        detail = refused(
            api.client.post("/v1/runs", json=api.run_request("pri2", overrides=overrides))
        )
        assert detail == "job.priority: 'urgent' is not approved for jobs; allowed: normal"
        assert apiserver.list("pytorchjobs", NAMESPACE) == []
        assert apiserver.list("trainjobs", NAMESPACE) == []
    finally:
        api.client.close()
        server.stop()


def test_a_60_kb_model_name_is_one_422_line(api, apiserver):
    response = api.client.post("/v1/runs", json={"model": "m" * 60_000})
    detail = refused(response)
    assert detail.startswith("model: 60000 characters; allowed: at most")
    too_long_option = api.client.post("/v1/runs", json={"model": "m" * 300})
    assert refused(too_long_option).startswith("model: ")
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_a_sweep_is_all_or_nothing_when_a_later_point_fails_its_checks(
    kubeconfig, token_dir, tmp_path, apiserver, monkeypatch
):
    # Point 1 needs 3 GPU nodes; the cluster has 2 and no node group to grow: the preflight
    # (on in a local serve with a stack's grants; the deployed service runs without it)
    # refuses it, and point 0 must not have been submitted either.
    monkeypatch.chdir(tmp_path)
    grants = "[{url: 's3://runs-bucket/runs/', access: readwrite}]"
    server, api = start_api(
        kubeconfig,
        token_dir,
        tmp_path / "runs",
        deployed=False,
        overrides=(f"storage.grants.training={grants}",),
    )
    request = {
        "overrides": [
            f"compute={GPU_TYPE}",
            f"job.image={IMAGE}",
            "storage.root=s3://runs-bucket/runs",
            "compute.nodes=2,3",
        ],
        "sweep_id": "aon1",
    }
    try:
        response = api.client.post("/v1/sweeps", json=request)
        assert response.status_code == 422, response.text
        assert response.json()["detail"].startswith("sweep point 1: ")
        assert apiserver.list("pytorchjobs", NAMESPACE) == []
        assert apiserver.list("configmaps", NAMESPACE) == []
    finally:
        api.client.close()
        server.stop()


def test_errors_never_echo_the_services_own_settings(kubeconfig, token_dir, tmp_path, apiserver):
    account = "123456789012"
    repository = f"{account}.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer"
    bucket = "acme-private-runs"
    server, api = start_api(
        kubeconfig,
        token_dir,
        tmp_path / "runs",
        overrides=(
            "storage=s3",
            f"storage.root=s3://{bucket}/runs",
            f"job.image_repository={repository}",
        ),
    )
    image = f"{repository}:abc123"
    bad = [
        ("/v1/sweeps", {"overrides": [f"compute={GPU_TYPE}", "trainer.max_steps=10,-1"]}),
        ("/v1/sweeps", {"overrides": [f"compute={GPU_TYPE}", "compute.nodes=2,0"]}),
        ("/v1/runs", {"compute": GPU_TYPE, "image": image, "overrides": ["trainer.warmup=x"]}),
        ("/v1/runs", {"compute": GPU_TYPE, "image": image, "trainer": {"max_steps": -1}}),
        ("/v1/runs", {"compute": GPU_TYPE, "storage_root": "s3://elsewhere/x"}),
        ("/v1/runs", {"compute": GPU_TYPE, "image": f"{repository}:latest"}),
    ]
    try:
        for path, body in bad:
            response = api.client.post(path, json=body)
            assert 400 <= response.status_code < 500, response.text
            for private in (account, bucket, repository, str(kubeconfig)):
                assert private not in response.text, (body, response.text)
        elsewhere = {"compute": GPU_TYPE, "image": image, "storage_root": "s3://elsewhere/x"}
        detail = refused(api.client.post("/v1/runs", json=elsewhere))
        assert detail == "storage.root: set by the service, not by a request"
        assert apiserver.list("pytorchjobs", NAMESPACE) == []
    finally:
        api.client.close()
        server.stop()


def test_a_sweep_the_cluster_fails_partway_is_rolled_back(api, apiserver):
    """Point 2's create is refused by the cluster after points 0 and 1 were created: both go
    again (their ConfigMaps with them); a point that was running before the request stays."""
    apiserver.operator.default = JobPlan(hold=True)
    base = [f"compute={GPU_TYPE}", f"job.image={IMAGE}"]
    # Point 0 as the request below asks it again (a point posted again with other values is a
    # relaunch, refused by its rule: tests/api/test_api_relaunch_and_inputs.py).
    first = api.client.post(
        "/v1/sweeps", json={"overrides": [*base, "trainer.lr=1"], "sweep_id": "rb1"}
    )
    assert first.status_code == 201, first.text
    running_uid = apiserver.get("pytorchjobs", "rb1-0", NAMESPACE)["metadata"]["uid"]

    apiserver.faults.reject_create["rb1-2"] = 403
    request = {"overrides": [*base, "trainer.lr=1,2,3"], "sweep_id": "rb1"}
    # trainer.lr=1 is point 0 (rb1-0, already active); 1 is created, 2 refused.
    response = api.client.post("/v1/sweeps", json=request)
    assert 400 <= response.status_code < 600 and response.status_code != 201, response.text
    detail = response.json()["detail"]
    assert "\n" not in detail and detail.startswith("sweep point 2: ")
    deadline = time.monotonic() + 10  # Foreground deletes finish after the fake's delay
    while apiserver.get("pytorchjobs", "rb1-1", NAMESPACE) is not None:
        assert time.monotonic() < deadline, "rb1-1 was not deleted"
        time.sleep(0.05)
    jobs = apiserver.list("pytorchjobs", NAMESPACE)
    assert [(j["metadata"]["name"], j["metadata"]["uid"]) for j in jobs] == [("rb1-0", running_uid)]
    maps = {m["metadata"]["name"] for m in apiserver.list("configmaps", NAMESPACE)}
    assert not any(name.startswith(("rb1-1", "rb1-2")) for name in maps), maps


def test_the_api_and_the_launcher_take_the_one_launch_path(api, apiserver, trainstack, monkeypatch):
    """A point the cluster refuses, asked of the API and of the kubernetes launcher: both
    submit through jobs.sweep_driver, the API all or nothing (point 0 goes again), the launcher
    going on past it (points 0 and 2 stay)."""
    from jobs.sweep_driver import Policy, SweepDriver

    policies, launches = [], []
    submit_in_order = SweepDriver.submit_in_order

    def spied(driver, numbers, checked, launched):
        policies.append(driver.policy)
        launches.append(launched)
        return submit_in_order(driver, numbers, checked, launched)

    monkeypatch.setattr(SweepDriver, "submit_in_order", spied)
    apiserver.operator.default = JobPlan(hold=True)
    apiserver.faults.reject_create.update({"lp-api-1": 403, "lp-cli-1": 403})
    base = [f"compute={GPU_TYPE}", f"job.image={IMAGE}", "trainer.lr=1,2,3"]
    response = api.client.post("/v1/sweeps", json={"overrides": base, "sweep_id": "lp-api"})
    assert response.status_code == 503, response.text
    detail = response.json()["detail"]
    assert detail.startswith("sweep point 1: create PyTorchJob training/lp-api-1 failed: 403")
    assert detail.endswith("; the 1 point(s) this request submitted before it were deleted")
    assert policies == [Policy.ALL_OR_NOTHING]
    deadline = time.monotonic() + 10  # Foreground deletes finish after the fake's delay
    while apiserver.get("pytorchjobs", "lp-api-0", NAMESPACE) is not None:
        assert time.monotonic() < deadline, "lp-api-0 was not deleted"
        time.sleep(0.05)

    sweep = ["-m", "hydra/launcher=kubernetes", "trainer.lr=1,2,3", "sweep_id=lp-cli"]
    assert trainstack("launch", *sweep, launch=True) == 1
    assert policies == [Policy.ALL_OR_NOTHING, Policy.GO_ON]
    assert len(launches[1].results) == 3 and launches[1].failed == 1  # counted, went on
    names = sorted(j["metadata"]["name"] for j in apiserver.list("pytorchjobs", NAMESPACE))
    assert names == ["lp-cli-0", "lp-cli-2"]
