"""Every RunStorage method, one suite run against a local directory and an s3:// run dir on
moto's HTTP server."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path

import pytest

from testing_support.s3_server import DUMMY_SECRET_KEY
from trainer.storage import (
    LocalStorage,
    RunStorage,
    S3Storage,
    StorageError,
    StorageNotFoundError,
    open_model_storage,
    open_run_storage,
    read_uri_bytes,
)


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> RunStorage:
    if request.param == "local":
        return open_run_storage(str(tmp_path / "runs" / "run-1"))
    request.getfixturevalue("s3_direct")
    bucket = request.getfixturevalue("s3_bucket")
    return open_run_storage(f"s3://{bucket}/runs/run-1")


def make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "__0_0.distcp": os.urandom(3000),
        ".metadata": b"meta",
        "nested/deeper/extra.bin": b"\x00\x01\x02",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_open_run_storage_picks_the_backend(storage: RunStorage, tmp_path: Path) -> None:
    if storage.is_remote:
        assert isinstance(storage, S3Storage)
        assert storage.root.startswith("s3://") and storage.root.endswith("/runs/run-1")
        assert storage.local_path("logs") is None
    else:
        assert isinstance(storage, LocalStorage)
        assert storage.local_path("logs/metrics.jsonl") == Path(storage.root, "logs/metrics.jsonl")
        assert storage.local_path() == Path(storage.root)


def test_write_read_overwrite(storage: RunStorage) -> None:
    storage.write_bytes("checkpoints/step-00000010/COMMITTED", b"")
    storage.write_text("config.yaml", "seed: 1\n")
    assert storage.read_text("config.yaml") == "seed: 1\n"
    storage.write_text("config.yaml", "seed: 2\nmodel: tiny — ünïcode\n")
    assert storage.read_text("config.yaml") == "seed: 2\nmodel: tiny — ünïcode\n"
    assert storage.read_bytes("checkpoints/step-00000010/COMMITTED") == b""


def test_append_text_creates_then_appends(storage: RunStorage) -> None:
    storage.append_text("logs/metrics.jsonl", '{"step": 1}\n')
    storage.append_text("logs/metrics.jsonl", '{"step": 2}\n')
    assert storage.read_text("logs/metrics.jsonl").splitlines() == ['{"step": 1}', '{"step": 2}']


def test_append_text_follows_other_writes(storage: RunStorage) -> None:
    storage.append_text("logs/metrics.jsonl", "a\n")
    storage.write_text("logs/metrics.jsonl", "replaced\n")
    storage.append_text("logs/metrics.jsonl", "b\n")
    assert storage.read_text("logs/metrics.jsonl") == "replaced\nb\n"
    storage.delete_tree("logs")
    storage.append_text("logs/metrics.jsonl", "c\n")
    assert storage.read_text("logs/metrics.jsonl") == "c\n"
    # A restarted run (a new instance) continues the existing file.
    open_run_storage(storage.root).append_text("logs/metrics.jsonl", "d\n")
    assert storage.read_text("logs/metrics.jsonl") == "c\nd\n"


def test_exists_and_list_dir(storage: RunStorage) -> None:
    assert not storage.exists("checkpoints")
    assert storage.list_dir("checkpoints") == []
    for step in (20, 10):
        storage.write_text(f"checkpoints/step-{step:08d}/COMMITTED", "")
    storage.write_text("checkpoints/step-00000030/.metadata", "x")
    storage.write_text("checkpoints/latest.txt", "30")
    assert storage.exists("checkpoints")
    assert storage.exists("checkpoints/step-00000010/COMMITTED")
    assert not storage.exists("checkpoints/step-00000030/COMMITTED")
    assert not storage.exists("checkpoints/step-0000001")  # a name prefix is not a directory
    assert storage.list_dir("checkpoints") == [
        "latest.txt",
        "step-00000010",
        "step-00000020",
        "step-00000030",
    ]
    assert storage.list_dir("") == ["checkpoints"]
    assert storage.list_dir("checkpoints/step-00000030") == [".metadata"]


def test_upload_and_download_dir_round_trip(storage: RunStorage, tmp_path: Path) -> None:
    source = tmp_path / "staging"
    files = make_tree(source)
    storage.upload_dir(source, "checkpoints/step-00000005")
    assert storage.list_dir("checkpoints/step-00000005") == [".metadata", "__0_0.distcp", "nested"]
    target = tmp_path / "restored"
    storage.download_dir("checkpoints/step-00000005", target)
    assert read_tree(target) == files


def test_file_sizes_lists_every_file_under_a_dir(storage: RunStorage, tmp_path: Path) -> None:
    files = make_tree(tmp_path / "src")
    storage.upload_dir(tmp_path / "src", "checkpoints/step-00000001")
    storage.write_text("checkpoints/other.txt", "x")
    assert storage.file_sizes("checkpoints/step-00000001") == {
        rel: len(data) for rel, data in files.items()
    }
    assert storage.file_sizes("checkpoints")["step-00000001/__0_0.distcp"] == 3000
    assert storage.file_sizes("nothing-here") == {}


def test_abort_uploads_leaves_no_unfinished_multipart_upload(storage: RunStorage) -> None:
    if not isinstance(storage, S3Storage):
        storage.abort_uploads("checkpoints")  # nothing to do, and no error
        return
    client, key = storage.client, storage.key("checkpoints/step-00000001/__0_0.distcp")
    client.create_multipart_upload(Bucket=storage.bucket, Key=key)
    client.create_multipart_upload(Bucket=storage.bucket, Key=storage.key("keep/me"))
    storage.abort_uploads("checkpoints")
    left = client.list_multipart_uploads(Bucket=storage.bucket).get("Uploads", [])
    assert [u["Key"] for u in left] == [storage.key("keep/me")]


def test_upload_file(storage: RunStorage, tmp_path: Path) -> None:
    source = tmp_path / "events.bin"
    source.write_bytes(b"tensorboard-ish")
    storage.upload_file(source, "logs/events.bin")
    assert storage.read_bytes("logs/events.bin") == b"tensorboard-ish"
    with pytest.raises(StorageNotFoundError, match=r"missing\.bin"):
        storage.upload_file(tmp_path / "missing.bin", "logs/x.bin")


def test_delete_tree_removes_only_that_subtree(storage: RunStorage, tmp_path: Path) -> None:
    make_tree(tmp_path / "a")
    storage.upload_dir(tmp_path / "a", "checkpoints/step-00000001")
    storage.upload_dir(tmp_path / "a", "checkpoints/step-00000002")
    storage.write_text("checkpoints/step-00000001x", "a sibling sharing the name prefix")
    storage.delete_tree("checkpoints/step-00000001")
    assert storage.list_dir("checkpoints") == ["step-00000001x", "step-00000002"]
    storage.delete_tree("checkpoints/step-00000001")  # missing is fine
    storage.delete_tree("checkpoints/step-00000001x")  # a single file too
    assert storage.list_dir("checkpoints") == ["step-00000002"]
    with pytest.raises(StorageError, match="refusing to delete the whole run dir"):
        storage.delete_tree("")


def test_missing_things_are_clear_errors(storage: RunStorage, tmp_path: Path) -> None:
    with pytest.raises(StorageNotFoundError) as excinfo:
        storage.read_text("logs/nope.jsonl")
    message = str(excinfo.value)
    assert storage.uri("logs/nope.jsonl") in message and "\n" not in message
    assert excinfo.value.__cause__ is not None
    assert isinstance(excinfo.value, FileNotFoundError)
    with pytest.raises(StorageNotFoundError, match="checkpoints/step-00000099"):
        storage.download_dir("checkpoints/step-00000099", tmp_path / "out")
    with pytest.raises(StorageError, match="not a directory"):
        storage.upload_dir(tmp_path / "no-such-dir", "checkpoints/x")


@pytest.mark.parametrize("rel", ["../escape", "/etc/passwd", "a/../../b"])
def test_paths_must_stay_inside_the_run_dir(storage: RunStorage, rel: str) -> None:
    with pytest.raises(StorageError, match="relative to the run dir"):
        storage.write_text(rel, "x")


def test_read_uri_bytes(storage: RunStorage, tmp_path: Path) -> None:
    storage.write_text("data/train.jsonl", '{"text": "hello"}\n')
    if storage.is_remote:
        uri = storage.uri("data/train.jsonl")
    else:
        uri = str(storage.local_path("data/train.jsonl"))
    assert read_uri_bytes(uri) == b'{"text": "hello"}\n'
    with pytest.raises(StorageNotFoundError, match=r"nope\.jsonl"):
        read_uri_bytes(storage.uri("data/nope.jsonl"))


@pytest.mark.parametrize(
    ("run_dir", "expected"),
    [
        ("", "run_dir is empty"),
        ("gs://bucket/run", "only local paths and s3:// URIs"),
        ("s3://", "has no bucket"),
        ("s3:///prefix", "has no bucket"),
    ],
)
def test_bad_run_dirs(run_dir: str, expected: str) -> None:
    with pytest.raises(StorageError, match=re.escape(expected)):
        open_run_storage(run_dir)


def test_read_uri_needs_a_key() -> None:
    with pytest.raises(StorageError, match="names a bucket but no object"):
        read_uri_bytes("s3://some-bucket/")


def test_missing_bucket_is_one_line_without_credentials(s3_direct: object) -> None:
    storage = open_run_storage("s3://no-such-bucket-here/run")
    with pytest.raises(StorageError) as excinfo:
        storage.write_text("config.yaml", "x")
    message = str(excinfo.value)
    assert message.startswith("cannot write s3://no-such-bucket-here/run/config.yaml: NoSuchBucket")
    assert "\n" not in message and DUMMY_SECRET_KEY not in message
    assert not isinstance(excinfo.value, StorageNotFoundError)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("AWS_MAX_ATTEMPTS", "lots", "AWS_MAX_ATTEMPTS='lots': must be a whole number >= 1"),
        ("AWS_MAX_ATTEMPTS", "0", "must be a whole number >= 1"),
        ("AWS_RETRY_MODE", "eager", "allowed values are standard, adaptive, legacy"),
    ],
)
def test_bad_retry_settings(
    s3_direct: object, monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(StorageError, match=re.escape(expected)):
        open_run_storage("s3://bucket/run")


def test_local_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = LocalStorage(tmp_path / "run")
    storage.write_text("checkpoints/latest", "old")

    def crash(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StorageError, match="No space left on device"):
        storage.write_text("checkpoints/latest", "new")
    monkeypatch.undo()
    assert storage.read_text("checkpoints/latest") == "old"
    assert sorted(p.name for p in (tmp_path / "run/checkpoints").iterdir()) == ["latest"]


def test_local_list_dir_hides_in_flight_temp_files(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "run")
    storage.write_text("logs/a.txt", "a")
    (tmp_path / "run/logs/.b.txt.1234abcd.partial").write_text("half")
    assert storage.list_dir("logs") == ["a.txt"]


# A run's own code writes into a shared local/FSx run dir: what it plants there is never
# followed out of the run dir nor opened when it is no regular file.


def planted(tmp_path: Path) -> tuple[LocalStorage, Path]:
    """A run dir whose eval/ holds a symlink to a file outside it, a symlinked folder (to
    another user's run) and a FIFO; `secret` is the file outside."""
    secret = tmp_path / "other-user/run/eval/step-00000010"
    secret.mkdir(parents=True)
    (secret / "results.json").write_text("theirs")
    storage = LocalStorage(tmp_path / "run")
    storage.write_text("eval/real/results.json", "mine")
    (tmp_path / "run/eval/link").mkdir()
    (tmp_path / "run/eval/link/results.json").symlink_to(secret / "results.json")
    (tmp_path / "run/eval/theirs").symlink_to(secret)
    (tmp_path / "run/shared").symlink_to(tmp_path / "other-user/run")
    (tmp_path / "run/eval/fifo").mkdir()
    os.mkfifo(tmp_path / "run/eval/fifo/results.json")
    return storage, secret


@pytest.mark.parametrize(
    "rel",
    [
        "eval/link/results.json",
        "eval/theirs/results.json",
        "shared/eval/step-00000010/results.json",
    ],
)
def test_local_reads_do_not_follow_a_planted_symlink(tmp_path: Path, rel: str) -> None:
    storage, _ = planted(tmp_path)
    assert storage.read_text("eval/real/results.json") == "mine"
    for read in (storage.read_bytes, lambda r: storage.read_range(r, 0).data):
        with pytest.raises(StorageError, match=r"symlink.*; allowed: regular files") as excinfo:
            read(rel)
        assert "\n" not in str(excinfo.value)


def test_local_listings_do_not_go_through_a_symlinked_folder(tmp_path: Path) -> None:
    storage, _ = planted(tmp_path)
    assert storage.list_dir("eval") == ["fifo", "link", "real", "theirs"]
    for rel in ("eval/theirs", "shared/eval"):
        with pytest.raises(StorageError, match="is a symlink"):
            storage.list_dir(rel)
    assert storage.file_sizes("eval") == {"real/results.json": 4}  # no link, no FIFO
    with pytest.raises(StorageError, match="is a symlink"):
        storage.file_sizes("shared")
    target = tmp_path / "copy"
    storage.download_dir("eval", target)
    assert read_tree(target) == {"real/results.json": b"mine"}
    with pytest.raises(StorageError, match="is a symlink"):
        storage.download_dir("eval/theirs", tmp_path / "copy2")


def test_a_planted_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer: without O_NONBLOCK this would hang."""
    storage, _ = planted(tmp_path)
    fifo = tmp_path / "run/eval/fifo/results.json"
    outcome: list[object] = []

    def read_all() -> None:
        for read in (
            storage.read_bytes,
            lambda r: storage.read_range(r, 0),
            lambda r: read_uri_bytes(str(fifo)),
        ):
            try:
                read("eval/fifo/results.json")
                outcome.append("read")
            except StorageError as exc:
                outcome.append(str(exc))

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():
        for _ in range(3):  # let each hung open return (EOF) so the thread ends
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(timeout=2)
        pytest.fail(f"a read of a FIFO blocked (done: {outcome})")
    assert len(outcome) == 3
    assert all("not a regular file; allowed: regular files" in str(m) for m in outcome), outcome


def hf_cache_snapshot(tmp_path: Path) -> Path:
    """The Hugging Face cache's layout: snapshot files are symlinks into blobs/, and one FIFO
    somebody left in the snapshot."""
    blobs = tmp_path / "hub/models--org--tiny/blobs"
    snapshot = tmp_path / "hub/models--org--tiny/snapshots/1111"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (blobs / "aaaa").write_text('{"model_type": "llama"}')
    (snapshot / "config.json").symlink_to(Path("../../blobs/aaaa"))
    os.mkfifo(snapshot / "pipe.json")
    return snapshot


def test_a_model_directory_follows_its_links_yet_reads_no_fifo(tmp_path: Path) -> None:
    """`open_model_storage` (model.init_from, the HF cache): links are the user's own, so they
    are followed; a FIFO is still refused, at once. A run dir's storage refuses the same link."""
    snapshot = hf_cache_snapshot(tmp_path)
    model = open_model_storage(str(snapshot))
    assert model.read_text("config.json") == '{"model_type": "llama"}'
    assert model.read_range("config.json", 0, 5).data == b'{"mod'
    assert model.list_dir("") == ["config.json", "pipe.json"]
    assert model.file_sizes("") == {"config.json": 23}
    model.download_dir("", tmp_path / "copy")
    assert read_tree(tmp_path / "copy") == {"config.json": b'{"model_type": "llama"}'}
    with pytest.raises(StorageError, match="not a regular file; allowed: regular files"):
        model.read_bytes("pipe.json")
    with pytest.raises(StorageError, match="a symlink; allowed: regular files"):
        open_run_storage(str(snapshot)).read_bytes("config.json")
    assert open_model_storage("s3://bucket/models/x").__class__.__name__ == "S3Storage"
