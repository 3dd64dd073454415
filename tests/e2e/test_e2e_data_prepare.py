"""`trainstack data prepare` on the cluster: an Indexed Job the real Job controller runs, its
pods scheduled on the CPU (system) node, never on a GPU node, under the data-prepare
ServiceAccount; the Job completes when every index's pod succeeds."""

from __future__ import annotations

from localcluster.cluster import EXIT_CODE_ANNOTATION
from localcluster.objects import BUCKET
from tests.e2e.conftest import NAMESPACE, eventually

COMPONENT_SELECTOR = "trainstack.io/component=data-prepare"


def test_prepare_runs_as_an_indexed_job_on_cpu_nodes(local_cluster):
    local_cluster.trainstack(
        "data",
        "prepare",
        "--to",
        f"s3://{BUCKET}/datasets/e2e",
        "--slices",
        "2",
        "--parallelism",
        "2",
        "--cpus",
        "2",
        "--memory",
        "2Gi",
        "backend=kubernetes",
        "stack=local",
        f"data.path=s3://{BUCKET}/raw/e2e.jsonl",
    )
    jobs = local_cluster.items("batch/v1", "Job", COMPONENT_SELECTOR)
    assert len(jobs) == 1, jobs
    job = jobs[0]
    name = job["metadata"]["name"]
    try:
        assert job["spec"]["completionMode"] == "Indexed"
        pods = eventually(
            lambda: (
                [
                    p
                    for p in local_cluster.items("v1", "Pod", f"job-name={name}")
                    if p["status"].get("phase") == "Running"
                ]
                if len(local_cluster.items("v1", "Pod", f"job-name={name}")) == 2
                else None
            ),
            "two running prepare pods",
        )
        assert {p["spec"]["nodeName"] for p in pods} == {"system-0"}
        assert {p["spec"]["serviceAccountName"] for p in pods} == {"data-prepare"}
        for pod in pods:
            local_cluster.resource("v1", "Pod").patch(
                name=pod["metadata"]["name"],
                namespace=NAMESPACE,
                body={"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0"}}},
                content_type="application/merge-patch+json",
            )
        eventually(
            lambda: any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in local_cluster.get("batch/v1", "Job", name)["status"].get("conditions")
                or []
            ),
            f"Job {name} Complete",
        )
    finally:
        local_cluster.resource("batch/v1", "Job").delete(
            name=name, namespace=NAMESPACE, body={"propagationPolicy": "Background"}
        )
