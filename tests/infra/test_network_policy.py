"""Issue 27 item 2: the VPC CNI enforces NetworkPolicy, the training namespace denies ingress by
default, each run's policy lets in only its own pods (rendezvous, NCCL/gloo sockets: any port),
and the Training API's only its port. Evaluated over the policies the stack records under the
mocks and the ones a job renders, against the labels of the rendered pods."""

from __future__ import annotations

import json

import pytest

from jobs.backends.kubernetes.data_prepare import PrepareJobSpec, indexed_job
from jobs.backends.kubernetes.manifest_checks import trainjob_pod_template
from tests.infra.netpol_eval import Pod, ingress_allowed
from tests.jobs.conftest import CLUSTER, build

NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RENDEZVOUS, NCCL_SOCKET, API_PORT = 29500, 43125, 8080


def recorded_policies(run) -> list[dict]:
    return [
        {"metadata": r.inputs["metadata"], "spec": r.inputs["spec"]}
        for r in run.of_type(NETWORK_POLICY)
    ]


def job_pods(run_id: str, api: str) -> tuple[list[Pod], dict]:
    """Two of the run's pods (a PyTorchJob's master and a worker; two of a TrainJob's nodes,
    labelled as its patch labels them) and its NetworkPolicy."""
    overrides = [*CLUSTER, "compute=g5.12xlarge", "compute.nodes=3", f"job.api={api}"]
    _, job, policy = build(overrides, run_id=run_id).manifests
    assert policy["kind"] == "NetworkPolicy"
    namespace = job["metadata"]["namespace"]
    if job["kind"] == "TrainJob":
        labels = trainjob_pod_template(job)["metadata"]["labels"]
        return [Pod(namespace, labels), Pod(namespace, dict(labels))], policy
    replicas = job["spec"]["pytorchReplicaSpecs"].values()
    return [Pod(namespace, r["template"]["metadata"]["labels"]) for r in replicas], policy


def test_vpc_cni_enforces_network_policies(stack_runs):
    for run in stack_runs.values():
        (cni,) = [
            r for r in run.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "vpc-cni"
        ]
        assert json.loads(cni.inputs["configurationValues"])["enableNetworkPolicy"] == "true"


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
def test_only_the_runs_own_pods_and_the_api_port_get_in(api_stack_run, job_api):
    namespace = "training"
    infra = recorded_policies(api_stack_run)
    deny = [p for p in infra if p["metadata"]["name"] == "default-deny-ingress"]
    assert deny and deny[0]["metadata"]["namespace"] == namespace
    api_deployment = next(
        r for r in api_stack_run.of_type("kubernetes:apps/v1:Deployment") if r.name.endswith("-api")
    )
    api = Pod(namespace, api_deployment.inputs["spec"]["template"]["metadata"]["labels"])
    (run_a_master, run_a_worker), policy_a = job_pods("run-a", job_api)
    (run_b_master, _), policy_b = job_pods("run-b", job_api)
    policies = [*infra, policy_a, policy_b]
    prepare = indexed_job(
        PrepareJobSpec(
            name="data-prepare-x",
            namespace=namespace,
            image="r/t:v1",
            service_account="data-prepare",
            data={},
            to="s3://b/datasets/x",
            slices=2,
            parallelism=2,
            retries_per_index=1,
            cpus=1,
            memory="1Gi",
            chunk_mb=1.0,
            region="us-east-1",
            kubernetes_version="1.35",
        )
    )
    prepare_pod = Pod(namespace, prepare["spec"]["template"]["metadata"]["labels"])
    elsewhere = Pod(
        "default", {"app.kubernetes.io/name": "trainstack", "trainstack.io/run-id": "run-a"}
    )

    for port in (RENDEZVOUS, NCCL_SOCKET):
        assert ingress_allowed(policies, run_a_worker, run_a_master, port)
        assert ingress_allowed(policies, run_a_master, run_a_worker, port)
        for intruder in (run_b_master, api, prepare_pod, elsewhere):
            assert not ingress_allowed(policies, intruder, run_a_master, port), intruder
    assert ingress_allowed(policies, elsewhere, api, API_PORT)
    assert not ingress_allowed(policies, run_a_master, api, RENDEZVOUS)
    assert not ingress_allowed(policies, run_a_master, prepare_pod, RENDEZVOUS)
    # Without the run's policy its own pods could not rendezvous: the default deny is real.
    assert not ingress_allowed(infra, run_a_worker, run_a_master, RENDEZVOUS)
