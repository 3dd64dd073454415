"""`trainstack serve-model RUN backend=kubernetes` on the real control plane: the API server
takes the ServiceAccount, NetworkPolicy, Service and Deployment (its admission: the restricted
Pod Security Standard, the PriorityClass and ServiceAccount must exist), the Deployment's pod
lands on a GPU node of the p5 group and the Deployment becomes Available (kwok runs no vLLM:
its pods turn Ready without the probes, which only a GPU node checks). `--down` leaves nothing
of it behind, and a second `--down` finds nothing and succeeds."""

from __future__ import annotations

from catalog.kubernetes import SERVING_PRIORITY_CLASS
from jobs.backends.kubernetes.serving import KINDS, selector
from localcluster.objects import BUCKET, STACK
from tests.e2e.conftest import NAMESPACE, conditions, eventually

RUN = "served-e2e"


def serving_objects(local_cluster) -> list[str]:
    return [
        f"{kind}/{item['metadata']['name']}"
        for api_version, kind in (*KINDS, ("v1", "Pod"))
        for item in local_cluster.items(api_version, kind, selector(RUN))
    ]


def test_serve_model_installs_a_deployment_that_becomes_available(local_cluster, moto_s3):
    moto_s3.client().put_object(Bucket=BUCKET, Key=f"runs/{RUN}/export/config.json", Body=b"{}")
    args = ("serve-model", RUN, f"stack={STACK}", "backend=kubernetes", "compute=p5.48xlarge")
    try:
        out = local_cluster.trainstack(*args, "compute.gpus_per_node=1")
        assert f"http://{RUN}-serve.{NAMESPACE}.svc.cluster.local:8000/v1" in out
        deployment = eventually(
            lambda: (
                d
                if conditions(d := local_cluster.get("apps/v1", "Deployment", f"{RUN}-serve"))
                .get("Available", {})
                .get("status")
                == "True"
                and (d.get("status") or {}).get("availableReplicas") == 1
                else None
            ),
            f"Deployment {RUN}-serve Available",
            timeout=120,
        )
        assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "trainstack"
        (pod,) = local_cluster.items("v1", "Pod", selector(RUN))
        assert pod["spec"]["nodeName"].startswith("p5-")
        assert pod["spec"]["priorityClassName"] == SERVING_PRIORITY_CLASS
        assert pod["spec"]["priority"] > 0
        assert pod["spec"]["serviceAccountName"] == RUN
        assert (
            local_cluster.get("v1", "Service", f"{RUN}-serve")["spec"]["ports"][0]["port"] == 8000
        )
        # The same again is an update of what is there, not a second server.
        local_cluster.trainstack(*args, "compute.gpus_per_node=1")
        assert len(local_cluster.items("apps/v1", "Deployment", selector(RUN))) == 1
    finally:
        down = local_cluster.trainstack(*args, "--down", check=False)
    assert f"{RUN}-serve: deleted" in down, down
    eventually(
        lambda: not serving_objects(local_cluster),
        f"{RUN}'s serving objects gone",
        describe=lambda: serving_objects(local_cluster),
    )
    again = local_cluster.trainstack(*args, "--down")
    assert "nothing was there" in again
