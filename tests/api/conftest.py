"""The Training API over real HTTP (uvicorn on 127.0.0.1) against the fake Kubernetes API."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testing_support.k8s.cluster import GPU_TYPE, NAMESPACE
from tests.api.server import ServerThread
from tests.k8s import conftest as cluster_fixtures

# The cluster tests' fixtures: the fake apiserver + operator, its kubeconfig, the CLI runner.
apiserver = cluster_fixtures.apiserver
kubeconfig = cluster_fixtures.kubeconfig
fast_retry = cluster_fixtures.fast_retry
fast_restarts = cluster_fixtures.fast_restarts
trainstack = cluster_fixtures.trainstack
__all__ = ["GPU_TYPE", "NAMESPACE", "apiserver", "fast_restarts", "fast_retry", "kubeconfig"]

TOKEN = "ts-new-0123456789abcdef"
OLD_TOKEN = "ts-old-fedcba9876543210"
"""Rotation: both hashes are in the Secret until clients have moved to the new token."""
USER = "alice"
"""Both tokens are hers."""
IMAGE = "registry.example.com/trainer:v1"
APPROVED_REGISTRY = "registry.example.com"
"""The service approves this registry (cluster.approved_images); any other image is refused."""


@dataclass
class Api:
    client: object
    """httpx.Client with the bearer token."""
    service: object
    url: str
    runs_root: Path | str
    pinned_root: bool = True
    """The service sets storage.root (as deployed): requests name none."""

    def run_request(self, run_id: str, **fields) -> dict:
        """A structured request for a GPU run on the fake cluster."""
        root = {} if self.pinned_root else {"storage_root": str(self.runs_root)}
        return {"run_id": run_id, "compute": GPU_TYPE, "image": IMAGE, **root, **fields}


@pytest.fixture
def token_dir(tmp_path: Path) -> Path:
    from jobs.api.auth import token_hash

    directory = tmp_path / "token-hashes"
    directory.mkdir()
    (directory / "current").write_text(f"{token_hash(TOKEN)} {USER}")
    (directory / "previous").write_text(f"sha256:{token_hash(OLD_TOKEN)} {USER}\n")
    return directory


STACK_REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer"
NODE_GROUP = (GPU_TYPE.replace(".", "-"), GPU_TYPE, 4)
"""The fake cluster's GPU node group: its runtime is trainstack-p4d-24xlarge."""


def deployed_overrides(
    job_api: str = "pytorchjob",
    queue: str | None = None,
    admins: tuple[str, ...] = (),
    bucket: str = "stack-bucket",
) -> list[str]:
    """The overrides `trainstack serve` gets in the cluster: infra's own `serve_args` (not a
    copy), parsed by the serve command's own parser; the stack's bucket is `bucket`."""
    import argparse

    from infra.bucket_layout import published_grants
    from infra.training_api import serve_args
    from jobs.commands.serve import add_arguments

    argv = serve_args(
        NAMESPACE,
        f"s3://{bucket}/runs",
        STACK_REPOSITORY,
        tls="nlb",
        admins=admins,
        job_api=job_api,
        node_groups=(NODE_GROUP,),
        queue=queue,
        grants=published_grants(bucket),
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv[1:]).overrides


def start_api(
    kubeconfig: Path,
    token_dir: Path | None,
    runs_root: Path | str,
    overrides: tuple[str, ...] = (),
    admins: tuple[str, ...] = (),
    job_api: str = "pytorchjob",
    deployed: bool = True,
    queue: str | None = None,
    **service_args,
):
    """The API in a thread, as the stack deploys it (`deployed`: infra's arguments) with only
    what points at this test's cluster changed: the kubeconfig, and local run dirs under
    `runs_root` for the stack's bucket (a request cannot choose its storage root in either).
    `deployed=False`: the README's local `trainstack serve` (no stack; a request may pick a
    storage root). These suites were written against PyTorchJobs (test_api_trainjob.py runs
    TrainJobs, the stack's default)."""
    import httpx

    from jobs.api.app import create_app
    from jobs.api.auth import TokenHashes
    from jobs.api.service import Service

    storage, bucket = ["storage=local", f"storage.root={runs_root}"], "stack-bucket"
    if str(runs_root).startswith("s3://"):  # as deployed: the stack's bucket
        storage, bucket = [], str(runs_root).removeprefix("s3://").split("/")[0]
    stack = (
        [*deployed_overrides(job_api, queue, bucket=bucket), *storage]
        if deployed
        else [f"job.api={job_api}"]
    )
    service = Service(
        overrides=[
            *stack,
            f"cluster.kubeconfig={kubeconfig}",
            f"cluster.approved_images=[{APPROVED_REGISTRY}]",
            *overrides,
        ],
        **service_args,
    )
    tokens = TokenHashes(token_dir, admins=admins) if token_dir else None
    server = ServerThread(create_app(service, tokens)).start()
    client = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    )
    return server, Api(client, service, server.url, runs_root, pinned_root=deployed)


@pytest.fixture
def api(kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch) -> Iterator[Api]:
    monkeypatch.chdir(tmp_path)
    server, handle = start_api(kubeconfig, token_dir, tmp_path / "runs")
    yield handle
    handle.client.close()
    server.stop()


@pytest.fixture
def local_api(
    kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch
) -> Iterator[Api]:
    """The README's local `trainstack serve` (no stack): requests may choose a storage root."""
    monkeypatch.chdir(tmp_path)
    server, handle = start_api(kubeconfig, token_dir, tmp_path / "runs", deployed=False)
    yield handle
    handle.client.close()
    server.stop()
