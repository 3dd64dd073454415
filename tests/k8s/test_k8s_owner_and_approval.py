"""The CLI's side of issue 23: `launch backend=kubernetes` checks images and Secrets when the
stack declares what is approved (items 3), and runs carry their owner for `runs --mine`
(item 5)."""

from __future__ import annotations

import time

import pytest

from testing_support.k8s.cluster import GPU_TYPE, NAMESPACE


@pytest.fixture
def approved_stack(tmp_path, monkeypatch):
    """A stack file as `python -m infra.stack_defaults` writes it from outputs that declare
    approved registries and Secrets."""
    from infra.stack_defaults import job_defaults, render

    outputs = {
        "cluster_name": "trainstack-t",
        "region": "us-east-1",
        "kubernetes_version": "1.33",
        "kubeconfig": "unused",
        "repository_url": "registry.example.com/trainstack/trainer",
        "storage_root": "s3://t-bucket/runs",
        "namespace": NAMESPACE,
        "service_account": "trainer",
        "gpu_node_groups": [
            {
                "name": "gpu",
                "instance_type": GPU_TYPE,
                "min_size": 0,
                "desired_size": 0,
                "max_size": 2,
            }
        ],
        "approved_images": ["registry.example.com/shared"],
        "approved_secrets": ["hf-read"],
        "approved_priorities": ["normal"],
    }
    conf = tmp_path / "user-conf"
    (conf / "stack").mkdir(parents=True)
    defaults = job_defaults(outputs, tmp_path / "kubeconfig-unused")
    (conf / "stack" / "approved.yaml").write_text(render(defaults, "approved"))
    monkeypatch.setenv("TRAINSTACK_CONFIG_PATH", str(conf))
    return "stack=approved"


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "job.image=docker.io/evil/img:1",
            "trainstack launch: job.image: 'docker.io/evil/img:1' is not from an approved "
            "registry; allowed: the stack's repository (job.image_repository) or "
            "cluster.approved_images",
        ),
        (
            "job.image=registry.example.com/trainer:v1",  # the registry, outside the paths
            "trainstack launch: job.image: 'registry.example.com/trainer:v1' is not from an "
            "approved registry; allowed: the stack's repository (job.image_repository) or "
            "cluster.approved_images",
        ),
        (
            "job.secrets.hf_token={name: trainstack-api-token-hashes, key: sha}",
            "trainstack launch: job.secrets.hf_token.name: Secret "
            "'trainstack-api-token-hashes' is not approved for jobs; allowed: the Secrets "
            "listed in cluster.approved_secrets",
        ),
        (
            "job.priority=urgent",
            "trainstack launch: job.priority: 'urgent' is not approved for jobs; allowed: normal",
        ),
    ],
)
def test_launch_checks_what_the_stack_approves(
    apiserver, trainstack, capsys, approved_stack, override, line
):
    approved_image = "job.image=registry.example.com/shared/t:v1"  # the image cases replace it
    code = trainstack("launch", approved_stack, "run_id=ap1", approved_image, override, launch=True)
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == line
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    assert apiserver.list("configmaps", NAMESPACE) == []


def test_launch_runs_what_the_stack_approves(apiserver, trainstack, approved_stack):
    images = (
        "registry.example.com/trainstack/trainer:v2",  # the stack's repository
        "registry.example.com/shared/trainer-nightly:v3",  # under an approved path
    )
    secret = "job.secrets.hf_token={name: hf-read, key: token}"
    for index, image in enumerate(images):
        run = f"run_id=ap-ok{index}"
        code = trainstack("launch", approved_stack, run, f"job.image={image}", secret, launch=True)
        assert code == 0
    assert len(apiserver.list("pytorchjobs", NAMESPACE)) == 2


def test_runs_mine_lists_the_runs_launched_under_my_name(
    apiserver, trainstack, capsys, monkeypatch
):
    for user, run_id in (("alice", "mine-a"), ("bob", "mine-b")):
        monkeypatch.setenv("TRAINSTACK_USER", user)
        assert trainstack("launch", f"run_id={run_id}", launch=True) == 0
        labels = apiserver.get("pytorchjobs", run_id, NAMESPACE)["metadata"]["labels"]
        assert labels["trainstack.io/owner"] == user
    monkeypatch.setenv("TRAINSTACK_USER", "alice")
    capsys.readouterr()
    assert trainstack("runs", "--mine", "--backend", "kubernetes") == 0
    out = capsys.readouterr().out
    assert "mine-a" in out and "mine-b" not in out
    assert trainstack("runs", "--backend", "kubernetes") == 0
    out = capsys.readouterr().out
    assert "mine-a" in out and "mine-b" in out
    monkeypatch.delenv("TRAINSTACK_USER")
    monkeypatch.delenv("USER", raising=False)
    assert trainstack("runs", "--mine", "--backend", "kubernetes") == 2
    assert "set $TRAINSTACK_USER" in capsys.readouterr().err


def test_cli_refuses_to_cancel_or_resubmit_another_users_run_without_force(
    apiserver, trainstack, capsys, monkeypatch
):
    from testing_support.k8s.fake_operator import JobPlan

    apiserver.operator.plans["bobs-done"] = [JobPlan(outcome="Succeeded")]
    apiserver.operator.plans["bobs-live"] = [JobPlan(hold=True)]
    monkeypatch.setenv("TRAINSTACK_USER", "bob")
    for run_id in ("bobs-done", "bobs-live"):
        assert trainstack("launch", f"run_id={run_id}", launch=True) == 0
    deadline = time.monotonic() + 10
    while "Succeeded" not in str(apiserver.get("pytorchjobs", "bobs-done", NAMESPACE)["status"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    before = {n: apiserver.get("pytorchjobs", n, NAMESPACE) for n in ("bobs-done", "bobs-live")}

    monkeypatch.setenv("TRAINSTACK_USER", "alice")
    capsys.readouterr()
    assert trainstack("cancel", "bobs-live", "--backend", "kubernetes") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "trainstack cancel: cancel bobs-live: run belongs to bob (trainstack.io/owner), you are "
        "alice ($TRAINSTACK_USER, else $USER); only its owner may change it: pass --force to "
        "act anyway"
    ]
    assert trainstack("launch", "run_id=bobs-done", launch=True) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("trainstack launch: resubmit bobs-done: run belongs to bob")
    for name, job in before.items():  # neither was touched (the operator updates status)
        now = apiserver.get("pytorchjobs", name, NAMESPACE)
        assert now["spec"] == job["spec"]
        for key in ("uid", "labels", "annotations"):
            assert now["metadata"].get(key) == job["metadata"].get(key)

    # Explicitly: --force acts on it (RBAC permitting).
    assert trainstack("cancel", "bobs-live", "--force", "--backend", "kubernetes") == 0
    live = apiserver.get("pytorchjobs", "bobs-live", NAMESPACE)
    assert live["spec"]["runPolicy"]["suspend"] is True
    assert trainstack("launch", "--force", "run_id=bobs-done", launch=True) == 0
    done = apiserver.get("pytorchjobs", "bobs-done", NAMESPACE)
    assert done["metadata"]["uid"] != before["bobs-done"]["metadata"]["uid"]

    # Her own runs need no flag.
    assert trainstack("launch", "run_id=alices", launch=True) == 0
    assert trainstack("cancel", "alices", "--backend", "kubernetes") == 0
