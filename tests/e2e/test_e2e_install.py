"""What `make cluster-up` installs (the objects `pulumi up` installs, from infra's pure
functions) is accepted by the real API server, its CRD schemas and the real webhooks, and
Kueue takes the queues into use."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from infra.kubeflow_trainer import runtime_objects
from localcluster.objects import local_stack
from tests.e2e.conftest import NAMESPACE, eventually

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
KUEUE_API = "kueue.x-k8s.io/v1beta1"


def _conditions(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_runtimes_are_served(local_cluster):
    names = {
        r["metadata"]["name"]
        for r in local_cluster.items(TRAINER_API, "ClusterTrainingRuntime", namespace=None)
    }
    config = local_stack()
    wanted = runtime_objects(config.gpu_node_groups, config.service_account)
    assert names == {r["metadata"]["name"] for r in wanted}


def test_kueue_takes_the_queues_into_use(local_cluster):
    """Kueue's controllers mark the ClusterQueue and LocalQueue Active only when the flavor,
    its resources and the queue's wiring are valid."""

    def active(kind: str, name: str, namespace: str | None):
        obj = local_cluster.get(KUEUE_API, kind, name, namespace)
        condition = _conditions(obj).get("Active", {})
        return obj if condition.get("status") == "True" else condition

    eventually(lambda: active("ClusterQueue", "trainstack", None), "ClusterQueue Active")
    eventually(lambda: active("LocalQueue", "training", NAMESPACE), "LocalQueue Active")
    priorities = {
        p["metadata"]["name"]: p["value"]
        for p in local_cluster.items(KUEUE_API, "WorkloadPriorityClass", namespace=None)
    }
    assert priorities == {"high": 1000, "default": 100, "low": 10}


def test_nodes_are_the_catalogs(local_cluster):
    nodes = {n["metadata"]["name"]: n for n in local_cluster.items("v1", "Node", namespace=None)}
    gpu = nodes["p5-0"]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu["status"]["allocatable"]["vpc.amazonaws.com/efa"] == "32"
    assert gpu["metadata"]["labels"]["trainstack.io/node-group"] == "p5"
    assert {"Ready": "True"}.items() <= {
        c["type"]: c["status"] for c in gpu["status"]["conditions"]
    }.items()


@pytest.mark.parametrize(
    ("api_version", "kind", "body", "refusal"),
    [
        (
            # The Trainer's validating webhook looks the runtime up; a CRD schema cannot.
            TRAINER_API,
            "TrainJob",
            {"spec": {"runtimeRef": {"name": "no-such-runtime"}}},
            "no-such-runtime",
        ),
        (
            # Kueue's webhook: a LocalQueue may not move to another ClusterQueue... nor name an
            # invalid one; here a flavor quota over a resource the group does not cover.
            KUEUE_API,
            "ClusterQueue",
            {
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": "p5",
                                    "resources": [{"name": "memory", "nominalQuota": "1"}],
                                }
                            ],
                        }
                    ]
                }
            },
            "memory",
        ),
    ],
    ids=["trainer-webhook", "kueue-validation"],
)
def test_the_real_admission_refuses(local_cluster, api_version, kind, body, refusal):
    """The webhooks are wired (by URL on 127.0.0.1) and called: a bad object is refused with
    the controller's own reason (server-side dry run: nothing is stored)."""
    namespaced = kind != "ClusterQueue"
    obj = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "e2e-refused", **({"namespace": NAMESPACE} if namespaced else {})},
        **body,
    }
    resource = local_cluster.resource(api_version, kind)
    with pytest.raises(ApiException) as refused:
        resource.create(body=obj, namespace=NAMESPACE if namespaced else None, dry_run="All")
    body = refused.value.body
    body = body.decode() if isinstance(body, bytes) else str(body)
    assert refused.value.status in (400, 403, 422), body
    assert refusal in body
