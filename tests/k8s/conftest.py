"""Fixtures for the cluster tests: the fake apiserver + operator, and a connected `Cluster`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing_support.k8s.cluster import GPU_TYPE, NAMESPACE, seed_cluster, seed_trainer
from testing_support.k8s.fake_apiserver import FakeKubeApiServer
from testing_support.k8s.fake_operator import FakeOperator, JobPlan
from testing_support.k8s.fake_trainer import FakeTrainer
from testing_support.s3_server import s3_env


@pytest.fixture
def apiserver() -> Iterator[FakeKubeApiServer]:
    server = FakeKubeApiServer().start()
    FakeOperator(server, JobPlan())
    FakeTrainer(server)
    seed_cluster(server)
    seed_trainer(server)
    yield server
    server.operator.shutdown()
    server.trainer.shutdown()
    server.stop()


@pytest.fixture
def kubeconfig(apiserver: FakeKubeApiServer, tmp_path: Path) -> Path:
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def fast_retry(monkeypatch: pytest.MonkeyPatch):
    """Bounded retries with short sleeps and timeouts, so fault tests stay quick."""
    from jobs.backends.kubernetes.client import api

    policy = api.RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05, read_timeout_s=0.5)
    monkeypatch.setattr(api, "DEFAULT_RETRY", policy)
    return policy


@pytest.fixture
def cluster(kubeconfig: Path, fast_retry):
    from jobs.backends.kubernetes.client.api import connect

    return connect(str(kubeconfig), "fake", NAMESPACE, retry=fast_retry)


@pytest.fixture
def fast_restarts(monkeypatch: pytest.MonkeyPatch):
    from jobs.backends.kubernetes.backend import KubernetesBackend

    monkeypatch.setattr(KubernetesBackend, "restart_backoff_s", 0.01)


@pytest.fixture
def trainstack(
    kubeconfig: Path, fast_retry, fast_restarts, tmp_path: Path, monkeypatch, exec_in_process
):
    """Run `trainstack ARGS...` in-process against the fake cluster; returns the exit code.

    Every call gets the cluster's kubeconfig and a local storage root under tmp_path."""
    from jobs.cli import main

    monkeypatch.chdir(tmp_path)
    where = [f"cluster.kubeconfig={kubeconfig}", f"storage.root={tmp_path / 'runs'}"]

    def run(*args: str, launch: bool = False) -> int:
        # launch: the test's own overrides come last, so they win.
        argv = [args[0], *LAUNCH_ARGS, *where, *args[1:]] if launch else [*args, *where]
        try:
            return main(argv)
        except SystemExit as exit_:  # a launch ends so (exec_in_process)
            return int(exit_.code or 0)

    return run


LAUNCH_ARGS = [
    "backend=kubernetes",
    f"compute={GPU_TYPE}",
    "job.image=registry.example.com/trainer:v1",
    "job.api=pytorchjob",  # these suites drive the operator v1; TrainJob: test_k8s_trainjob.py
]


ACCOUNT = "123456789012"  # moto's default account
REGISTRY = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"


def moto_client(moto_s3, monkeypatch, service: str, endpoint_env: str):
    """boto3's `service` client; boto3 in this process (the product's code too) talks to the
    moto server for it, through `endpoint_env`, for this test."""
    import boto3

    for name, value in s3_env(moto_s3.url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(endpoint_env, moto_s3.url)
    return boto3.client(service, region_name="us-east-1")


@pytest.fixture
def ecr(moto_s3, monkeypatch):
    """boto3's ECR client in this process talks to moto; a repository with tag v1 pushed."""
    client = moto_client(moto_s3, monkeypatch, "ecr", "AWS_ENDPOINT_URL_ECR")
    client.create_repository(repositoryName="trainstack/trainer")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"digest": "sha256:" + "1" * 64, "size": 1, "mediaType": "x"},
        "layers": [],
    }
    pushed = client.put_image(
        repositoryName="trainstack/trainer", imageManifest=json.dumps(manifest), imageTag="v1"
    )
    yield pushed["image"]["imageId"]["imageDigest"]
    client.delete_repository(repositoryName="trainstack/trainer", force=True)
