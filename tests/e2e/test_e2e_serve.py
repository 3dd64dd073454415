"""`trainstack serve` with the arguments the stack deploys it with (infra.training_api's
serve_args), authenticated as its own ServiceAccount, so the Role infra renders is what limits
it: its routes work, and what the Role does not grant is a 403 from the real RBAC.

How it is started, and how that differs from the pod: testing_support/deployed_api.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client as kube
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError

from jobs.backends.kubernetes.eval_job import eval_selector, job_name
from jobs.backends.kubernetes.eval_schedule import PLAN_ANNOTATION
from testing_support.deployed_api import api_account_kubeconfig, deployed_api
from tests.e2e.conftest import NAMESPACE, eventually, remove_run

TOKEN = "ts-e2e-0123456789abcdef"
USER = "e2e"


@pytest.fixture(scope="module")
def api_account(local_cluster, tmp_path_factory) -> Path:
    return api_account_kubeconfig(local_cluster, tmp_path_factory.mktemp("api") / "kubeconfig")


@pytest.fixture(scope="module")
def served(local_cluster, api_account, moto_s3, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    home = tmp_path_factory.mktemp("serve")
    with deployed_api(local_cluster, api_account, moto_s3, home, {USER: TOKEN}) as where:
        yield where


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
