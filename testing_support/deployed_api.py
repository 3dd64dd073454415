"""`trainstack serve` with the arguments the stack deploys it with (infra.training_api's
serve_args) against the real local control plane (testing_support.local_control_plane),
authenticated as its own ServiceAccount, so the Role infra renders is what limits it.

What differs from the pod, and why: it listens on 127.0.0.1 (not 0.0.0.0) on a free port, the
token hashes and TLS files are temporary files at the paths the flags name, the S3 root is a
bucket on the moto server given, and its kubeconfig holds a token the API server issued for
the ServiceAccount (TokenRequest), as the projected token in the pod would be. Used by
tests/e2e (test_e2e_serve.py and the tests that load or kill the service) and
benchmarks/bench_api_load_localcluster.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import yaml
from kubernetes import client as kube
from kubernetes import config as kube_config

from infra.bucket_layout import published_grants
from infra.training_api import TLS_DIR, TOKEN_DIR, api_name, serve_args
from jobs.api.auth import token_hash
from localcluster.objects import REPOSITORY, local_stack
from testing_support.api_process import ApiProcess, free_port
from testing_support.local_control_plane import CHECKOUT_ENV, NAMESPACE, TRAINSTACK
from testing_support.s3_server import MotoS3, s3_env


def service_account_kubeconfig(cluster, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as `account` with a token the API server issued."""
    core = kube.CoreV1Api(kube_config.new_client_from_config(str(cluster.state.kubeconfig)))
    request = kube.AuthenticationV1TokenRequest(
        spec=kube.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = core.create_namespaced_service_account_token(account, NAMESPACE, request).status.token
    admin = yaml.safe_load(cluster.state.kubeconfig.read_text())
    admin["users"] = [{"name": account, "user": {"token": token}}]
    admin["contexts"] = [
        {"name": "local", "context": {"cluster": "local", "user": account, "namespace": NAMESPACE}}
    ]
    path.write_text(yaml.safe_dump(admin))
    return path


def api_account_kubeconfig(cluster, path: Path) -> Path:
    """A kubeconfig for the Training API's own ServiceAccount (the one infra's Role binds)."""
    return service_account_kubeconfig(cluster, api_name(local_stack().cluster.name), path)


@contextlib.contextmanager
def deployed_api(
    local_cluster, api_account: Path, moto_s3: MotoS3, home: Path, users: dict[str, str]
) -> Iterator[tuple[str, Path]]:
    """`trainstack serve` as deployed (the module docstring), with a token per user; yields
    its URL and the CA that signed its certificate."""
    api = deployed_process(local_cluster, api_account, moto_s3, home, users)
    try:
        api.start(timeout_s=60)
        yield api.url, Path(api.verify)
    finally:
        api.stop()


def deployed_process(
    local_cluster, api_account: Path, moto_s3: MotoS3, home: Path, users: dict[str, str]
) -> ApiProcess:
    """`deployed_api`'s service, not started: for tests that kill and restart it."""
    tokens = home / "token-hashes"
    tokens.mkdir()
    for user, token in users.items():
        (tokens / user).write_text(f"{token_hash(token)} {user}")
    tls = local_cluster.state.directory / "pki"
    bucket = "e2e-runs"
    with contextlib.suppress(Exception):  # made by an earlier start this session
        moto_s3.client().create_bucket(Bucket=bucket)
    port = free_port()
    # What infra/__main__.py passes the TrainingApi for the local stack: its runtimes, its
    # queue, its operator's kind and its S3 grants (here on the session's bucket).
    stack = local_stack()
    args = serve_args(
        NAMESPACE,
        f"s3://{bucket}/runs",
        REPOSITORY,
        tls="pod",
        job_api=stack.training_operator,
        node_groups=tuple((g.name, g.instance.name, g.max_size) for g in stack.gpu_node_groups),
        queue=stack.kueue.local_queue if stack.kueue else None,
        grants=published_grants(bucket, stack.data_access),
    )
    # The deployed flags, with the pod's paths and address swapped for this machine's.
    swapped = {
        "--host=0.0.0.0": "--host=127.0.0.1",
        f"--port={8080}": f"--port={port}",
        f"--token-hashes={TOKEN_DIR}": f"--token-hashes={tokens}",
        f"--tls-cert={TLS_DIR}/tls.crt": f"--tls-cert={tls / 'webhook.crt'}",
        f"--tls-key={TLS_DIR}/tls.key": f"--tls-key={tls / 'webhook.key'}",
    }
    assert set(swapped) <= set(args), args
    argv = [swapped.get(arg, arg) for arg in args]
    env = {
        **CHECKOUT_ENV,
        **s3_env(moto_s3.url),
        "KUBECONFIG": str(api_account),
        "TRAINSTACK_CONFIG_PATH": str(home / "config"),
    }
    return ApiProcess.of_command(
        [str(TRAINSTACK), *argv],
        f"https://127.0.0.1:{port}",
        home,
        env=env,
        verify=str(tls / "ca.crt"),
    )
