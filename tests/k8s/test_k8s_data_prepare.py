"""`trainstack data prepare backend=kubernetes|render`: the Indexed Job through the real
client against the fake apiserver, whose batch controller runs every index as a real
`python -m trainer.data.prepare` process against moto S3."""

from __future__ import annotations

import json

import pytest
import yaml

from testing_support.k8s.cluster import NAMESPACE
from testing_support.k8s.fake_batch import FakeBatchController
from testing_support.s3_server import FaultProxy, Link, s3_env
from tests.data.prepared import load, read_s3, texts, write_jsonl
from tests.k8s.conftest import REGISTRY

IMAGE = "registry.example.com/trainer:v1"


@pytest.fixture
def corpus(tmp_path, moto_s3, s3_bucket):
    """Four JSONL sources under s3://<bucket>/in/ (one gzip), a few hundred lines each."""
    client = moto_s3.client()
    for index in range(4):
        name = f"in/part-{index}.jsonl" + (".gz" if index == 2 else "")
        records = [{"text": t} for t in texts(300, seed=index)]
        local = write_jsonl(tmp_path / name, records, "gz" if index == 2 else "")
        client.put_object(Bucket=s3_bucket, Key=name, Body=local.read_bytes())
    return f"s3://{s3_bucket}/in/"


@pytest.fixture
def batch(apiserver, moto_s3, s3_bucket):
    client = moto_s3.client()

    def count() -> int:
        return client.list_objects_v2(Bucket=s3_bucket, Prefix="ds/").get("KeyCount", 0)

    def committed() -> bool:
        return "Contents" in client.list_objects_v2(Bucket=s3_bucket, Prefix="ds/manifest.json")

    # The pods reach moto over a link with 20 ms per request, so a slice takes long enough
    # for a sabotage to land mid-write.
    proxy = FaultProxy(moto_s3.url, link=Link(latency_s=0.02, mib_per_s=200)).start()
    controller = FakeBatchController(
        apiserver, s3_env(proxy.url), committed=committed, objects_under=count
    )
    yield controller
    controller.shutdown()
    proxy.stop()


def prepare_args(source: str, to: str, *extra: str, backend: str = "kubernetes") -> list[str]:
    return [
        "data",
        "prepare",
        "--to",
        to if "://" in to or "/" in to else f"s3://{to}/ds",
        "--slices",
        "3",
        "--cpus",
        "1",
        "--chunk-mb",
        "0.002",
        f"backend={backend}",
        f"job.image={IMAGE}",
        f"data.path={source}",
        "data.tokenizer=byte",
        "backend.poll_interval_s=0.1",
        *extra,
    ]


def test_render_writes_a_checked_indexed_job(trainstack, tmp_path, capsys):
    rendered = f"backend.output_root={tmp_path / 'rendered'}"
    code = trainstack(
        *prepare_args("s3://b/in/", "b", "--parallelism", "2", rendered, backend="render")
    )
    assert code == 0, capsys.readouterr().err
    (path,) = (tmp_path / "rendered").glob("*/manifests.yaml")
    (job,) = list(yaml.safe_load_all(path.read_text()))
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 2)
    assert spec["backoffLimitPerIndex"] == 3 and pod["restartPolicy"] == "Never"
    assert spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE and "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["command"][:3] == ["python", "-m", "trainer.data.prepare"]
    assert pod["serviceAccountName"] == "data-prepare" and "tolerations" not in pod
    off_gpus = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert "p5.48xlarge" in off_gpus["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]


GRANTS = (
    "storage.grants.data_prepare=[{url: 's3://b/datasets/', access: readwrite},"
    " {url: 's3://b/raw/', access: read}]"
)


@pytest.mark.parametrize(
    ("source", "to", "refused"),
    [
        (
            "s3://b/raw/web/",
            "s3://b/ds",
            "--to: 's3://b/ds' is outside the data-prepare pods' readwrite grants",
        ),
        ("s3://b/in/", "s3://b/datasets/web", "data.path: 's3://b/in/' is outside"),
        ("s3://b/raw/web/", "s3://b/datasets/web", None),
    ],
)
def test_a_stack_with_grants_refuses_an_ungranted_url(
    trainstack, tmp_path, capsys, source, to, refused
):
    rendered = tmp_path / "rendered"
    args = prepare_args(source, to, f"backend.output_root={rendered}", GRANTS, backend="render")
    code = trainstack(*args)
    err = capsys.readouterr().err
    if refused is None:
        assert code == 0, err
        assert len(list(rendered.glob("*/manifests.yaml"))) == 1
        return
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"trainstack data prepare: {refused}"), err
    assert "trainstack:dataAccess" in err
    assert not rendered.exists()


def test_submit_pins_an_ecr_image_to_its_digest(trainstack, apiserver, ecr, capsys):
    image = f"{REGISTRY}/trainstack/trainer:v1"
    code = trainstack(*prepare_args("s3://b/in/", "b"), f"job.image={image}")
    assert code == 0, capsys.readouterr().err
    (job,) = apiserver.list("jobs", NAMESPACE, None)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"{REGISTRY}/trainstack/trainer@{ecr}"
    # The pods never mount an API token and write only to their scratch emptyDir.
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_a_local_output_is_refused_for_the_cluster(trainstack, capsys):
    code = trainstack(
        *prepare_args("s3://b/in/", "b")[:3], "runs/ds", *prepare_args("s3://b/in/", "b")[4:]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("trainstack data prepare: --to: 'runs/ds' is not on S3")
        and err.count("\n") == 1
    )


def test_submit_retries_a_killed_index_and_commits_after_the_last(
    trainstack, batch, corpus, s3_bucket, moto_s3, apiserver, capsys, tmp_path
):
    batch.sabotage = {1: 1}  # index 1's first pod is killed after its first shard landed
    code = trainstack(*prepare_args(corpus, s3_bucket, "--parallelism", "1", "--wait"))
    out, err = capsys.readouterr()
    assert code == 0, (out, err, [a.stderr for a in batch.attempts])
    assert "3/3 slices done" in out.splitlines()[-1]

    tries = [(a.index, a.exit_code) for a in batch.attempts]
    assert tries == [(0, 0), (1, -9), (2, 0), (1, 0)]  # the killed index retried alone, last
    assert [a.committed_after for a in batch.attempts] == [False, False, False, True]
    job = apiserver.list("jobs", NAMESPACE)[0]
    assert job["status"]["failed"] == 1 and job["status"]["succeeded"] == 3

    # The committed dataset is the one a prepare on this machine makes of the same sources.
    client = moto_s3.client()
    manifest, train, _ = load(read_s3(client, s3_bucket, "ds"), "train")
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="ds/")["Contents"]}
    assert keys == {"ds/manifest.json"} | {f"ds/{f}" for s in manifest.shards for f in s.files}
    assert len(manifest.sources) == 4 and sum(len(d) for d in train) > 0

    from contract.config import DataConfig
    from trainer.data.prepare import PrepareRequest, prepare

    env = s3_env(moto_s3.url)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        here = PrepareRequest(
            DataConfig(path=corpus, tokenizer="byte"), f"s3://{s3_bucket}/here", 1, 1, 0.002
        )
        prepare(here, progress=False)
    local = client.get_object(Bucket=s3_bucket, Key="here/manifest.json")["Body"].read()
    assert json.loads(local) == manifest_json(client, s3_bucket)

    # Submitting the same request again finds the Job: nothing new is created.
    assert trainstack(*prepare_args(corpus, s3_bucket, "--parallelism", "1")) == 0
    assert "already submitted" in capsys.readouterr().out
    assert apiserver.count("POST", "/jobs") == 2  # one create, one 409


def manifest_json(client, bucket: str) -> dict:
    return json.loads(client.get_object(Bucket=bucket, Key="ds/manifest.json")["Body"].read())


def test_bad_input_fails_each_index_once_and_commits_nothing(
    trainstack, batch, s3_bucket, moto_s3, capsys
):
    source = f"s3://{s3_bucket}/nothing-here/"
    code = trainstack(*prepare_args(source, s3_bucket, "--parallelism", "3", "--wait"))
    out, _ = capsys.readouterr()
    assert code == 1 and "Failed" in out.splitlines()[-1]
    assert sorted((a.index, a.exit_code) for a in batch.attempts) == [(0, 2), (1, 2), (2, 2)]
    assert all("matches no JSONL file" in a.stderr for a in batch.attempts)
    assert moto_s3.client().list_objects_v2(Bucket=s3_bucket, Prefix="ds/")["KeyCount"] == 0
