"""`trainstack serve` with the arguments the stack deploys it with (infra.training_api's
serve_args), authenticated as its own ServiceAccount, so the Role infra renders is what limits
it: its routes work, and what the Role does not grant is a 403 from the real RBAC.

What differs from the pod, and why: it listens on 127.0.0.1 (not 0.0.0.0) on a free port, the
token hashes and TLS files are temporary files at the paths the flags name, the S3 root is a
bucket on the session's moto server, and its kubeconfig holds a token the API server issued for
the ServiceAccount (TokenRequest), as the projected token in the pod would be."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client as kube
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError

from infra.bucket_layout import published_grants
from infra.training_api import TLS_DIR, TOKEN_DIR, api_name, serve_args
from jobs.api.auth import token_hash
from jobs.backends.kubernetes.eval_job import eval_selector, job_name
from jobs.backends.kubernetes.eval_schedule import PLAN_ANNOTATION
from localcluster.objects import REPOSITORY, local_stack
from testing_support.api_process import ApiProcess, free_port
from testing_support.s3_server import s3_env
from tests.e2e.conftest import CHECKOUT_ENV, NAMESPACE, TRAINSTACK, eventually, remove_run

TOKEN = "ts-e2e-0123456789abcdef"
USER = "e2e"


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


@pytest.fixture(scope="module")
def api_account(local_cluster, tmp_path_factory) -> Path:
    account = api_name(local_stack().cluster.name)
    return service_account_kubeconfig(
        local_cluster, account, tmp_path_factory.mktemp("api") / "kubeconfig"
    )


@pytest.fixture(scope="module")
def served(local_cluster, api_account, moto_s3, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    home = tmp_path_factory.mktemp("serve")
    with deployed_api(local_cluster, api_account, moto_s3, home, {USER: TOKEN}) as where:
        yield where


@contextlib.contextmanager
def deployed_api(
    local_cluster, api_account: Path, moto_s3, home: Path, users: dict[str, str]
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
    local_cluster, api_account: Path, moto_s3, home: Path, users: dict[str, str]
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


def test_routes_work_as_the_api_service_account(local_cluster, served):
    url, ca = served
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, verify=str(ca), headers=headers, timeout=60) as api:
        run_id = "e2e-api"
        try:
            submitted = api.post(
                "/v1/runs", json={"run_id": run_id, "compute": "p5.48xlarge", "nodes": 1}
            )
            assert submitted.status_code == 201, submitted.text
            job = local_cluster.get("trainer.kubeflow.org/v1alpha1", "TrainJob", run_id)
            assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
            listed = eventually(
                lambda: [r for r in api.get("/v1/runs").json()["runs"] if r["run_id"] == run_id],
                "the run in GET /v1/runs",
            )
            assert listed
            assert api.get(f"/v1/runs/{run_id}").status_code == 200
            assert api.delete(f"/v1/runs/{run_id}").status_code in (200, 202, 204)
        finally:
            remove_run(local_cluster, run_id)


def test_every_checkpoint_gets_its_eval_job_from_the_api_with_nobody_following(
    local_cluster, served, moto_s3
):
    """`eval.every_checkpoint=true` through the API: the plan is on the TrainJob, and the
    service's scheduler, as the API's ServiceAccount (the real RBAC of infra's Role), submits
    the eval Job of a checkpoint that lands while no `launch --wait` follows."""
    url, ca = served
    headers = {"Authorization": f"Bearer {TOKEN}"}
    run_id = "e2e-api-evals"
    with httpx.Client(base_url=url, verify=str(ca), headers=headers, timeout=60) as api:
        try:
            body = {
                "run_id": run_id,
                "compute": "p5.48xlarge",
                "nodes": 1,
                "overrides": ["eval.every_checkpoint=true", "eval.tasks=[arc_easy]"],
            }
            submitted = api.post("/v1/runs", json=body)
            assert submitted.status_code == 201, submitted.text
            job = local_cluster.get("trainer.kubeflow.org/v1alpha1", "TrainJob", run_id)
            assert PLAN_ANNOTATION in job["metadata"]["annotations"]
            marker = f"runs/{run_id}/checkpoints/step-00000002/COMMITTED"
            moto_s3.client().put_object(Bucket="e2e-runs", Key=marker, Body=b"")
            evals = eventually(
                lambda: local_cluster.items("batch/v1", "Job", eval_selector(run_id)),
                "the eval Job the API's scheduler submits",
            )
            assert [j["metadata"]["name"] for j in evals] == [job_name(run_id, 2)]
        finally:
            for job in local_cluster.items("batch/v1", "Job", eval_selector(run_id)):
                with contextlib.suppress(ApiException, NotFoundError):
                    local_cluster.resource("batch/v1", "Job").delete(
                        name=job["metadata"]["name"],
                        namespace=NAMESPACE,
                        body={"propagationPolicy": "Background"},
                    )
            remove_run(local_cluster, run_id)


@pytest.mark.parametrize(
    "attempt",
    ["create a ClusterTrainingRuntime", "read a Secret", "list nodes"],
)
def test_what_the_role_does_not_grant_is_a_403(local_cluster, api_account, attempt):
    """The identity the service runs as, against the real RBAC of infra's Role."""
    api_client = kube_config.new_client_from_config(str(api_account))
    with pytest.raises(ApiException) as refused:
        if attempt == "create a ClusterTrainingRuntime":
            kube.CustomObjectsApi(api_client).create_cluster_custom_object(
                "trainer.kubeflow.org",
                "v1alpha1",
                "clustertrainingruntimes",
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "ClusterTrainingRuntime",
                    "metadata": {"name": "e2e-foreign"},
                    "spec": {"template": {"spec": {}}},
                },
            )
        elif attempt == "read a Secret":
            kube.CoreV1Api(api_client).list_namespaced_secret(NAMESPACE)
        else:
            kube.CoreV1Api(api_client).list_node()
    assert refused.value.status == 403, refused.value.body
