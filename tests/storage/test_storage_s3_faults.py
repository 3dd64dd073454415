"""S3 run dirs under injected faults: boto3 talks to moto through `FaultProxy`, which answers
chosen requests with 503 SlowDown / 500 InternalError. Transient faults must be retried by
botocore (and counted here); persistent ones must end in one clear StorageError with nothing
half-written left behind."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig

from testing_support.s3_server import (
    ACK_NOT_STORED,
    CUT_STREAM,
    DUMMY_SECRET_KEY,
    FaultProxy,
    MotoS3,
    fail_every_nth,
    fail_matching,
)
from trainer.storage import S3Storage, StorageError, open_run_storage, read_uri_bytes

MIB = 1024 * 1024
# S3's smallest multipart part is 5 MiB: an 11 MiB file makes three parts.
SMALL_PARTS = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)


@pytest.fixture
def few_attempts(monkeypatch: pytest.MonkeyPatch) -> int:
    """Bounded attempts kept small so a persistent outage fails fast."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    return 3


def object_keys(moto_s3: MotoS3, bucket: str) -> list[str]:
    listing = moto_s3.client().list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def test_transient_faults_on_every_verb_are_retried(
    fault_proxy: FaultProxy, s3_bucket: str, tmp_path: Path
) -> None:
    fault_proxy.set_rule(fail_every_nth(3, status=503))
    storage = open_run_storage(f"s3://{s3_bucket}/runs/r1")
    staging = tmp_path / "step"
    files = {f"__{i}_0.distcp": os.urandom(2048 + i) for i in range(4)} | {".metadata": b"m"}
    staging.mkdir()
    for name, data in files.items():
        (staging / name).write_bytes(data)

    storage.write_text("config.yaml", "seed: 0\n")
    for step in range(3):
        storage.append_text("logs/metrics.jsonl", f'{{"step": {step}}}\n')
    storage.upload_dir(staging, "checkpoints/step-00000003")
    storage.write_text("checkpoints/step-00000003/COMMITTED", "")
    assert storage.exists("checkpoints/step-00000003/COMMITTED")
    assert storage.list_dir("checkpoints/step-00000003") == sorted([*files, "COMMITTED"])
    restored = tmp_path / "restored"
    storage.download_dir("checkpoints/step-00000003", restored)
    assert {p.name: p.read_bytes() for p in restored.iterdir()} == {**files, "COMMITTED": b""}
    assert storage.read_text("logs/metrics.jsonl").count("step") == 3
    assert read_uri_bytes(storage.uri("config.yaml")) == b"seed: 0\n"
    storage.delete_tree("checkpoints/step-00000003")
    assert not storage.exists("checkpoints/step-00000003")

    assert fault_proxy.faults >= 8, fault_proxy.seen
    # Each injected fault cost exactly one retry, and only the first attempt ever failed.
    assert fault_proxy.retries == fault_proxy.faults
    assert {r.method for r in fault_proxy.seen if r.fault} >= {"GET", "PUT"}


def test_transient_500_on_checkpoint_keys(
    fault_proxy: FaultProxy, s3_bucket: str, tmp_path: Path
) -> None:
    fault_proxy.set_rule(
        fail_matching(r"/checkpoints/", status=500, methods=("PUT",), first_attempt_only=True)
    )
    storage = open_run_storage(f"s3://{s3_bucket}/run")
    (tmp_path / "a.distcp").write_bytes(b"a" * 100)
    (tmp_path / "b.distcp").write_bytes(b"b" * 100)
    storage.upload_dir(tmp_path, "checkpoints/step-00000001")
    storage.write_text("checkpoints/step-00000001/COMMITTED", "")
    assert storage.read_bytes("checkpoints/step-00000001/a.distcp") == b"a" * 100
    assert fault_proxy.faults == 3 and fault_proxy.retries == 3


def test_persistent_outage_fails_with_one_clear_line(
    fault_proxy: FaultProxy, s3_bucket: str, moto_s3: MotoS3, few_attempts: int
) -> None:
    fault_proxy.set_rule(fail_matching(r"/config\.yaml", status=503))
    storage = open_run_storage(f"s3://{s3_bucket}/run")
    with pytest.raises(StorageError) as excinfo:
        storage.write_text("config.yaml", "seed: 0\n")
    message = str(excinfo.value)
    assert message == (
        f"cannot write s3://{s3_bucket}/run/config.yaml: SlowDown (HTTP 503) after "
        f"{few_attempts} attempts: Please reduce your request rate."
    )
    assert DUMMY_SECRET_KEY not in message
    assert excinfo.value.__cause__ is not None
    assert fault_proxy.faults == few_attempts  # bounded: no retry loop beyond botocore's
    assert object_keys(moto_s3, s3_bucket) == []


def test_outage_midway_through_a_checkpoint_leaves_nothing_committed(
    fault_proxy: FaultProxy, s3_bucket: str, moto_s3: MotoS3, tmp_path: Path, few_attempts: int
) -> None:
    storage = open_run_storage(f"s3://{s3_bucket}/run")
    staging = tmp_path / "staging"
    staging.mkdir()
    for i in range(6):
        (staging / f"__{i}_0.distcp").write_bytes(bytes([i]) * 1000)
    storage.upload_dir(staging, "checkpoints/step-00000002")
    storage.write_text("checkpoints/step-00000002/COMMITTED", "")

    # The outage starts after two files of the next checkpoint have landed.
    fault_proxy.set_rule(fail_matching(r"/checkpoints/step-00000004/", status=500, after=2))
    with pytest.raises(StorageError, match=r"upload to s3://.*/step-00000004: InternalError"):
        storage.upload_dir(staging, "checkpoints/step-00000004")
        storage.write_text("checkpoints/step-00000004/COMMITTED", "")  # never reached

    fault_proxy.set_rule(None)
    committed = [
        name
        for name in storage.list_dir("checkpoints")
        if storage.exists(f"checkpoints/{name}/COMMITTED")
    ]
    assert committed == ["step-00000002"]
    partial = storage.list_dir("checkpoints/step-00000004")
    assert 2 <= len(partial) < 6 and "COMMITTED" not in partial
    # Whatever landed is whole: per-object atomic puts.
    for name in partial:
        assert (
            storage.read_bytes(f"checkpoints/step-00000004/{name}") == (staging / name).read_bytes()
        )


def test_multipart_upload_retries_a_failed_part(
    fault_proxy: FaultProxy, s3_bucket: str, tmp_path: Path
) -> None:
    fault_proxy.set_rule(fail_matching(r"partNumber=2(&|$)", status=503, first_attempt_only=True))
    storage = S3Storage(f"s3://{s3_bucket}/run", transfer_config=SMALL_PARTS)
    big = tmp_path / "shard.distcp"
    big.write_bytes(os.urandom(11 * MIB))
    storage.upload_file(big, "checkpoints/step-00000001/shard.distcp")
    assert storage.read_bytes("checkpoints/step-00000001/shard.distcp") == big.read_bytes()
    assert fault_proxy.faults == 1 and fault_proxy.retries == 1
    assert sum(1 for r in fault_proxy.seen if "partNumber=" in r.path) == 4  # 3 parts + 1 retry


def test_failed_multipart_upload_is_aborted(
    fault_proxy: FaultProxy, s3_bucket: str, moto_s3: MotoS3, tmp_path: Path, few_attempts: int
) -> None:
    fault_proxy.set_rule(fail_matching(r"partNumber=3(&|$)", status=500))
    storage = S3Storage(f"s3://{s3_bucket}/run", transfer_config=SMALL_PARTS)
    big = tmp_path / "shard.distcp"
    big.write_bytes(os.urandom(11 * MIB))
    with pytest.raises(StorageError, match="InternalError"):
        storage.upload_file(big, "checkpoints/step-00000001/shard.distcp")
    assert object_keys(moto_s3, s3_bucket) == []
    uploads = moto_s3.client().list_multipart_uploads(Bucket=s3_bucket)
    assert uploads.get("Uploads", []) == []
    assert any(r.method == "DELETE" and "uploadId=" in r.path for r in fault_proxy.seen)


def test_appends_cost_one_put_each_after_the_first_read(
    fault_proxy: FaultProxy, s3_bucket: str
) -> None:
    storage = open_run_storage(f"s3://{s3_bucket}/run")
    for step in range(5):
        storage.append_text("logs/metrics.jsonl", f'{{"step": {step}}}\n')
    methods = [r.method for r in fault_proxy.seen if "metrics.jsonl" in r.path]
    assert methods == ["HEAD"] + ["PUT"] * 5  # one look (not there yet), then only writes
    assert storage.read_text("logs/metrics.jsonl").count("step") == 5


@pytest.mark.parametrize("fault", [503, CUT_STREAM], ids=["slowdown", "stream-cut-midway"])
def test_reads_survive_a_failed_or_cut_off_response(
    fault_proxy: FaultProxy, s3_bucket: str, moto_s3: MotoS3, fault: int
) -> None:
    corpus = os.urandom(2 * MIB)
    moto_s3.client().put_object(Bucket=s3_bucket, Key="data/train.jsonl", Body=corpus)
    moto_s3.client().put_object(Bucket=s3_bucket, Key="run/checkpoints/.metadata", Body=corpus)
    storage = open_run_storage(f"s3://{s3_bucket}/run")
    reads = {
        "/data/train.jsonl": lambda: read_uri_bytes(f"s3://{s3_bucket}/data/train.jsonl"),
        "/.metadata": lambda: storage.read_bytes("checkpoints/.metadata"),
    }
    for path, read in reads.items():
        fault_proxy.set_rule(fail_matching(re.escape(path), fault, ("GET",), times=1))
        assert read() == corpus
    assert fault_proxy.faults == 2


def test_unreachable_endpoint_is_one_clear_line(
    s3_direct: MotoS3, monkeypatch: pytest.MonkeyPatch, few_attempts: int
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # discard port: refused
    storage = open_run_storage("s3://some-bucket/run")
    with pytest.raises(StorageError) as excinfo:
        storage.write_text("config.yaml", "x")
    message = str(excinfo.value)
    assert message.startswith("cannot write s3://some-bucket/run/config.yaml: Could not connect")
    assert "\n" not in message and DUMMY_SECRET_KEY not in message


def test_malformed_endpoint_names_the_variable(
    s3_direct: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "not-a-url")
    with pytest.raises(StorageError, match=r"Invalid endpoint: not-a-url.*AWS_ENDPOINT_URL_S3"):
        open_run_storage("s3://some-bucket/run")


def test_a_write_acknowledged_but_not_stored_is_honest(
    fault_proxy: FaultProxy, s3_bucket: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    """The proxy's ACK_NOT_STORED answers like S3 after storing, and stores nothing: a plain
    PUT, and the POST completing a multipart upload (whose parts then stay uploaded)."""
    fault_proxy.set_rule(
        fail_matching(r"/lost(\?uploadId=[^&]*)?$", ACK_NOT_STORED, ("PUT", "POST"))
    )
    storage = S3Storage(f"s3://{s3_bucket}/run", transfer_config=SMALL_PARTS)
    storage.write_bytes("lost", b"never stored")  # no error: acknowledged
    big = tmp_path / "big"
    big.write_bytes(os.urandom(6 * MIB))
    storage.upload_file(big, "big/lost")  # two parts stored, the completion acknowledged
    storage.write_bytes("kept", b"stored")
    assert object_keys(moto_s3, s3_bucket) == ["run/kept"]
    (upload,) = moto_s3.client().list_multipart_uploads(Bucket=s3_bucket)["Uploads"]
    assert upload["Key"] == "run/big/lost"
    assert [r.method for r in fault_proxy.seen if r.fault == ACK_NOT_STORED] == ["PUT", "POST"]
