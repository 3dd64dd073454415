"""Issue 45, the cluster half of eval: `trainstack eval RUN backend=kubernetes|render` is one
queued batch Job on one GPU (schema-checked, restricted, the run's service account and run-id
label, bounded), submitted through the real client to the fake apiserver or written out;
every bad input is one line, exit 2, before anything is created or written."""

from __future__ import annotations

import json

import pytest
import yaml

from catalog.kubernetes import PRIORITY_LABEL, QUEUE_LABEL
from jobs.backends.kubernetes import eval_job
from jobs.backends.kubernetes.eval_job import (
    COMPONENT_LABEL,
    EVAL_OF_LABEL,
    MAX_NAME,
    eval_template,
    job_name,
    to_manifests,
)
from jobs.backends.kubernetes.manifest_checks import ManifestError
from jobs.backends.kubernetes.network_policy import RUN_ID_LABEL
from jobs.compose import compose
from testing_support.k8s.cluster import NAMESPACE
from trainer.evaluation.config import EvalConfig

IMAGE = "registry.example.com/trainer:hf-v1"
RUN = "tiny-20260101-000000-abcd"
CLUSTER_KEYS = [
    "backend=kubernetes",
    "compute=p5.48xlarge",
    f"job.image={IMAGE}",
    "job.queue=training-queue",
    "job.priority=high",
]


def rendered_job(*extra: str) -> dict:
    cfg = compose([*CLUSTER_KEYS, *extra])
    spec = eval_template(cfg, RUN, f"s3://b/runs/{RUN}", EvalConfig(tasks=["arc_easy"]), IMAGE)
    (job,) = to_manifests(spec.at(40))
    return job


def test_the_eval_job_is_one_queued_gpu_pod_that_never_outranks_training():
    job = rendered_job()
    meta, spec = job["metadata"], job["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert (job["apiVersion"], job["kind"], meta["name"]) == ("batch/v1", "Job", f"{RUN}-eval-40")
    # Its own Kueue workload in the stack's LocalQueue, created suspended; no priority class
    # (Kueue's 0), even though the training job's config names `high`.
    assert meta["labels"][QUEUE_LABEL] == "training-queue" and spec["suspend"] is True
    assert PRIORITY_LABEL not in meta["labels"]
    assert PRIORITY_LABEL not in spec["template"]["metadata"]["labels"]
    # One GPU of the instance type, requests equal to limits, no EFA.
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1" and container["resources"]["requests"] == limits
    assert "vpc.amazonaws.com/efa" not in limits and "hugepages-2Mi" not in limits
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    # The run's service account, the run's NetworkPolicy label, no privilege, bounded.
    assert pod["serviceAccountName"] == "trainer" and pod["automountServiceAccountToken"] is False
    assert spec["template"]["metadata"]["labels"][RUN_ID_LABEL] == RUN
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert spec["activeDeadlineSeconds"] == eval_job.DEFAULT_DEADLINE_S
    assert spec["backoffLimit"] == 1 and pod["restartPolicy"] == "Never"
    assert spec["podFailurePolicy"]["rules"][0]["action"] == "FailJob"
    assert spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2]
    # The trainer image's entry point, on the run dir and step, with the settings as JSON.
    assert container["command"][:3] == ["python", "-m", "trainer.evaluation.job"]
    args = container["command"][3:]
    assert args[:4] == ["--run-dir", f"s3://b/runs/{RUN}", "--step", "40"]
    assert json.loads(args[5])["tasks"] == ["arc_easy"]
    assert meta["labels"][COMPONENT_LABEL] == "eval" and meta["labels"][EVAL_OF_LABEL] == RUN


def test_a_users_wall_clock_limit_and_capacity_are_kept():
    job = rendered_job("job.active_deadline_seconds=600", "compute.capacity=spot")
    assert job["spec"]["activeDeadlineSeconds"] == 600
    selector = job["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["eks.amazonaws.com/capacityType"] == "SPOT"


def test_without_a_queue_the_job_is_not_suspended():
    job = rendered_job("job.queue=null", "job.priority=null")
    assert "suspend" not in job["spec"] and QUEUE_LABEL not in job["metadata"]["labels"]


def test_the_schema_check_refuses_what_the_api_server_would(monkeypatch):
    real = eval_job.eval_job

    def broken(spec):
        job = real(spec)
        job["spec"]["backoffLimit"] = "one"  # the API server's schema: an integer
        return job

    monkeypatch.setattr(eval_job, "eval_job", broken)
    with pytest.raises(ManifestError, match="backoffLimit"):
        rendered_job()


def test_the_restricted_check_refuses_a_privileged_pod(monkeypatch):
    real = eval_job.eval_job

    def broken(spec):
        job = real(spec)
        job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
        return job

    monkeypatch.setattr(eval_job, "eval_job", broken)
    with pytest.raises(ManifestError, match="privileged"):
        rendered_job()


def test_job_names_are_stable_bounded_and_distinct():
    assert job_name("r1", 7) == job_name("r1", 7) == "r1-eval-7"
    long_a, long_b = "a" * 60 + "x", "a" * 60 + "y"
    names = {job_name(long_a, 123456), job_name(long_b, 123456)}
    assert len(names) == 2 and all(len(n) <= MAX_NAME for n in names)
    assert all(n.endswith("-eval-123456") for n in names)


# -- the command -------------------------------------------------------------------------------


@pytest.fixture
def run_dir(moto_s3, s3_bucket, s3_direct) -> str:
    """An S3 run dir with the run's config and committed checkpoints at steps 20 and 40."""
    client = moto_s3.client()
    client.put_object(Bucket=s3_bucket, Key=f"runs/{RUN}/config.yaml", Body=b"seed: 0\n")
    for step in (20, 40):
        key = f"runs/{RUN}/checkpoints/step-{step:08d}/COMMITTED"
        client.put_object(Bucket=s3_bucket, Key=key, Body=b"")
    return f"s3://{s3_bucket}/runs/{RUN}"


@pytest.fixture
def tasks_checked(monkeypatch):
    """Task names taken as known (lm-eval's full index takes ~30 s: one test pays it)."""
    from jobs.commands import eval_cluster

    seen = []
    monkeypatch.setattr(eval_cluster, "check_task_names", seen.append)
    return seen


EVAL_ARGS = ["compute=p5.48xlarge", f"job.image={IMAGE}", "eval.tasks=[arc_easy]"]


def eval_jobs(apiserver) -> list[dict]:
    return apiserver.list("jobs", NAMESPACE)


def test_eval_submits_the_newest_checkpoints_job_once(
    trainstack, apiserver, run_dir, tasks_checked, capsys
):
    assert trainstack("eval", run_dir, "backend=kubernetes", *EVAL_ARGS) == 0
    out = capsys.readouterr().out
    assert f"{RUN}-eval-40: created" in out and f"results to {run_dir}/eval/step-00000040/" in out
    (job,) = eval_jobs(apiserver)
    assert job["metadata"]["name"] == f"{RUN}-eval-40"
    assert tasks_checked[0].tasks == ["arc_easy"]
    # Again: the same Job is found, never a twin.
    assert trainstack("eval", run_dir, "backend=kubernetes", *EVAL_ARGS) == 0
    assert f"{RUN}-eval-40: already submitted" in capsys.readouterr().out
    assert len(eval_jobs(apiserver)) == 1
    assert trainstack("eval", run_dir, "--step", "20", "backend=kubernetes", *EVAL_ARGS) == 0
    assert {j["metadata"]["name"] for j in eval_jobs(apiserver)} == {
        f"{RUN}-eval-40",
        f"{RUN}-eval-20",
    }


def test_render_writes_the_job_and_submits_nothing(
    trainstack, apiserver, run_dir, tasks_checked, tmp_path, capsys
):
    out_root = tmp_path / "rendered"
    code = trainstack(
        "eval", run_dir, "--step", "20", "backend=render", f"backend.output_root={out_root}",
        *EVAL_ARGS,
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    (job,) = yaml.safe_load_all((out_root / f"{RUN}-eval-20" / "manifests.yaml").read_text())
    assert (
        job["kind"] == "Job"
        and "--step" in job["spec"]["template"]["spec"]["containers"][0]["command"]
    )
    assert eval_jobs(apiserver) == []


BAD = {
    "no checkpoint at the step": (
        ["--step", "30"],
        "--step: no committed checkpoint at step 30; committed: 20, 40",
    ),
    "an endpoint": (["--endpoint", "http://127.0.0.1:8000"], "--endpoint: not with backend="),
    "a local task dir": (["eval.include_path=."], "eval.include_path: '.' is this machine's"),
    "no GPU": (["compute=local_cpu"], "compute: 'local_cpu' has no GPU"),
    "no image": (["job.image=null"], "job.image: the eval pod needs the trainer image"),
    "an unknown key": (["eval.max_concurrent=2"], "eval.max_concurrent: no such key"),
    "no tasks": (["eval.tasks=[]"], "eval.tasks: name at least one task"),
    "outside the grants": (
        ["storage.grants.training=[{url: 's3://elsewhere/', access: readwrite}]"],
        "RUN: ",
    ),
}


@pytest.mark.parametrize("backend", ["kubernetes", "render"])
@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_and_nothing_is_created(
    trainstack, apiserver, run_dir, tasks_checked, tmp_path, capsys, case, backend
):
    extra, message = BAD[case]
    out_root = tmp_path / "rendered"
    code = trainstack(
        "eval", run_dir, f"backend={backend}", f"backend.output_root={out_root}", *EVAL_ARGS,
        *extra,
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"trainstack eval: {message}"), err
    assert eval_jobs(apiserver) == [] and not out_root.exists()


@pytest.mark.parametrize(
    ("removed", "message"),
    [
        ("checkpoints", "--step: s3://"),  # no committed checkpoint
        ("config.yaml", "RUN: s3://"),  # the run's config: nothing to export with
    ],
)
def test_a_run_without_a_checkpoint_or_its_config_is_refused(
    trainstack, apiserver, run_dir, moto_s3, s3_bucket, tasks_checked, capsys, removed, message
):
    client = moto_s3.client()
    for item in client.list_objects_v2(Bucket=s3_bucket, Prefix=f"runs/{RUN}/{removed}")[
        "Contents"
    ]:
        client.delete_object(Bucket=s3_bucket, Key=item["Key"])
    code = trainstack("eval", run_dir, "backend=kubernetes", *EVAL_ARGS)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"trainstack eval: {message}"), err
    assert eval_jobs(apiserver) == []


def test_a_run_here_is_not_one_a_pod_can_read(trainstack, apiserver, tmp_path, capsys):
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    code = trainstack("eval", str(tmp_path / "runs" / "r1"), "backend=kubernetes", *EVAL_ARGS)
    err = capsys.readouterr().err
    assert code == 2 and "is not on S3" in err and err.count("\n") == 1, err
    assert eval_jobs(apiserver) == []


@pytest.mark.slow
def test_an_unknown_task_name_is_refused_here_by_lm_evals_index(
    trainstack, apiserver, run_dir, capsys
):
    """lm-eval's own index (about 30 s), as `trainstack eval` here reads it: before submit."""
    code = trainstack("eval", run_dir, "backend=kubernetes", *EVAL_ARGS, "eval.tasks=[no_such_t]")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("trainstack eval: eval.tasks: no task named 'no_such_t'"), err
    assert eval_jobs(apiserver) == []
