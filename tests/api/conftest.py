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
    runs_root: Path

    def run_request(self, run_id: str, **fields) -> dict:
        """A structured request for a GPU run on the fake cluster."""
        return {
            "run_id": run_id,
            "compute": GPU_TYPE,
            "image": IMAGE,
            "storage_root": str(self.runs_root),
            **fields,
        }


@pytest.fixture
def token_dir(tmp_path: Path) -> Path:
    from jobs.api.auth import token_hash

    directory = tmp_path / "token-hashes"
    directory.mkdir()
    (directory / "current").write_text(f"{token_hash(TOKEN)} {USER}")
    (directory / "previous").write_text(f"sha256:{token_hash(OLD_TOKEN)} {USER}\n")
    return directory


def start_api(
    kubeconfig: Path,
    token_dir: Path | None,
    runs_root: Path,
    overrides: tuple[str, ...] = (),
    admins: tuple[str, ...] = (),
    job_api: str = "pytorchjob",
    **service_args,
):
    """The API in a thread. These suites were written against PyTorchJobs (the service's
    stack says which kind; test_api_trainjob.py runs it on TrainJobs)."""
    import httpx

    from jobs.api.app import create_app
    from jobs.api.auth import TokenHashes
    from jobs.api.service import Service

    service = Service(
        overrides=[
            f"cluster.kubeconfig={kubeconfig}",
            f"cluster.approved_images=[{APPROVED_REGISTRY}]",
            f"job.api={job_api}",
            *overrides,
        ],
        **service_args,
    )
    tokens = TokenHashes(token_dir, admins=admins) if token_dir else None
    server = ServerThread(create_app(service, tokens)).start()
    client = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    )
    return server, Api(client, service, server.url, runs_root)


@pytest.fixture
def api(kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch) -> Iterator[Api]:
    monkeypatch.chdir(tmp_path)
    server, handle = start_api(kubeconfig, token_dir, tmp_path / "runs")
    yield handle
    handle.client.close()
    server.stop()
