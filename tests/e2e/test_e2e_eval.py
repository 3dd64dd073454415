"""`trainstack eval RUN backend=kubernetes` against the real components: the eval Job is its own
Kueue Workload in the stack's LocalQueue at Kueue's priority 0, so while a training job holds
the whole GPU quota it waits with Kueue's reason and preempts nothing, even a `low` one; once
the quota is free Kueue admits it and the scheduler puts its pod on a (kwok) p5 node under the
run's service account; the pod "exits" 0 (kwok runs no container: the exit-code annotation)
and the Job completes. What the pod would run (lm-eval on a GPU) is not run here."""

from __future__ import annotations

import contextlib

import boto3
from kubernetes.dynamic.exceptions import NotFoundError

from localcluster.cluster import EXIT_CODE_ANNOTATION
from localcluster.objects import BUCKET
from tests.e2e.conftest import (
    JOBS,
    NAMESPACE,
    admitted,
    conditions,
    eventually,
    remove_run,
    workload_of,
)

RUN = "e2e-evrun"
TRAINING = "e2e-evtrain"
RUN_DIR = f"s3://{BUCKET}/runs/{RUN}"
EVAL_JOB = f"{RUN}-eval-8"


def seed_run(cluster) -> None:
    """A run dir on (moto's) S3 with its config and a committed checkpoint at step 8."""
    env = cluster.env
    s3 = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL_S3"],
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    s3.put_object(Bucket=BUCKET, Key=f"runs/{RUN}/config.yaml", Body=b"seed: 0\n")
    s3.put_object(Bucket=BUCKET, Key=f"runs/{RUN}/checkpoints/step-00000008/COMMITTED", Body=b"")


def eval_pods(cluster) -> list[dict]:
    return cluster.items("v1", "Pod", f"job-name={EVAL_JOB}")


def test_the_eval_job_waits_for_free_gpus_preempts_nothing_and_runs_on_a_gpu_node(local_cluster):
    seed_run(local_cluster)
    _, kind = JOBS["pytorchjob"]
    try:
        # Training first, both p5 nodes (the whole quota), at the lowest named priority.
        local_cluster.launch(
            "compute=p5.48xlarge",
            "compute.nodes=2",
            "job.api=pytorchjob",
            "job.priority=low",
            f"run_id={TRAINING}",
        )
        eventually(lambda: admitted(local_cluster, kind, TRAINING), f"{TRAINING} admitted")
        printed = local_cluster.trainstack(
            "eval",
            RUN_DIR,
            "backend=kubernetes",
            "stack=local",
            "compute=p5.48xlarge",
            "eval.tasks=[arc_easy]",
            timeout=300,  # lm-eval's index of its own tasks checks the name here (~30 s)
        )
        assert f"{EVAL_JOB}: created" in printed, printed
        job = local_cluster.get("batch/v1", "Job", EVAL_JOB)
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
        workload = eventually(lambda: workload_of(local_cluster, "Job", EVAL_JOB), "its Workload")
        assert int(workload["spec"].get("priority") or 0) == 0
        reason = eventually(
            lambda: (
                conditions(workload_of(local_cluster, "Job", EVAL_JOB) or {})
                .get("QuotaReserved", {})
                .get("message")
            ),
            "Kueue's reason for holding the eval Job",
        )
        assert "insufficient unused quota" in reason, reason
        # It took nothing from training: not admitted, training not evicted, no pod.
        assert not admitted(local_cluster, "Job", EVAL_JOB)
        assert "Evicted" not in conditions(workload_of(local_cluster, kind, TRAINING))
        assert eval_pods(local_cluster) == []

        remove_run(local_cluster, TRAINING)
        eventually(lambda: admitted(local_cluster, "Job", EVAL_JOB), "the eval Job admitted")
        (pod,) = eventually(
            lambda: [p for p in eval_pods(local_cluster) if p["spec"].get("nodeName")],
            "the eval pod scheduled",
        )
        assert pod["spec"]["nodeName"].startswith("p5"), pod["spec"]["nodeName"]
        assert pod["spec"]["serviceAccountName"] == "trainer"
        assert pod["metadata"]["labels"]["trainstack.io/run-id"] == RUN
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert container["command"][:3] == ["python", "-m", "trainer.evaluation.job"]
        local_cluster.resource("v1", "Pod").patch(
            name=pod["metadata"]["name"],
            namespace=NAMESPACE,
            body={"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0"}}},
            content_type="application/merge-patch+json",
        )
        eventually(
            lambda: (
                conditions(local_cluster.get("batch/v1", "Job", EVAL_JOB))
                .get("Complete", {})
                .get("status")
                == "True"
            ),
            f"Job {EVAL_JOB} Complete",
        )
        # Submitted again: the same Job is found, never a second one.
        again = local_cluster.trainstack(
            "eval",
            RUN_DIR,
            "backend=kubernetes",
            "stack=local",
            "compute=p5.48xlarge",
            "eval.tasks=[arc_easy]",
            timeout=300,
        )
        assert f"{EVAL_JOB}: already submitted" in again, again
    finally:
        remove_run(local_cluster, TRAINING)
        with contextlib.suppress(NotFoundError):
            local_cluster.resource("batch/v1", "Job").delete(
                name=EVAL_JOB, namespace=NAMESPACE, body={"propagationPolicy": "Background"}
            )
