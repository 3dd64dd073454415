"""Run-dir storage: one interface over a local directory and an ``s3://bucket/prefix``.

Every read and write the trainer does under its run dir goes through `RunStorage`, so a run
behaves the same on a laptop disk and on S3. Paths are relative to the run dir and
'/'-separated. Failures surface as one `StorageError` line naming the URI and the cause (the
original exception stays chained); nothing here retries by hand.

S3 retries are botocore's own (``standard`` mode by default: throttling, 5xx and connection
errors retried with jittered backoff, bounded attempts). ``AWS_RETRY_MODE`` and
``AWS_MAX_ATTEMPTS`` are honoured; the endpoint comes from ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL``, which boto3 reads itself.

Atomicity: local writes go to a temp file in the same directory and are renamed into place;
an S3 PUT (and a completed multipart upload) is atomic per object. A directory upload is not
atomic as a whole — callers that need "all or nothing" (checkpoints, `trainer.checkpoint`)
write a marker object last, after checking every file landed (`file_sizes`: one listing), and
delete it first when removing the tree.
"""

from __future__ import annotations

from trainer.storage.base import RunStorage, StorageError, StorageNotFoundError, clean_rel
from trainer.storage.local import LocalStorage, read_local_file
from trainer.storage.s3 import S3_SCHEME, S3Storage, read_s3_object

__all__ = [
    "LocalStorage",
    "RunStorage",
    "S3Storage",
    "StorageError",
    "StorageNotFoundError",
    "clean_rel",
    "open_model_storage",
    "open_run_storage",
    "read_uri_bytes",
]


def open_run_storage(run_dir: str) -> RunStorage:
    """`S3Storage` for an s3:// run dir, `LocalStorage` for a filesystem path."""
    if not run_dir:
        raise StorageError("run_dir is empty: give a local directory or s3://bucket/prefix")
    if run_dir.startswith(S3_SCHEME):
        return S3Storage(run_dir)
    if "://" in run_dir:
        raise StorageError(f"run_dir {run_dir!r}: only local paths and s3:// URIs are supported")
    return LocalStorage(run_dir)


def open_model_storage(source: str) -> RunStorage:
    """`open_run_storage` for a model directory the user names (`model.init_from`, a Hugging
    Face cache snapshot): a local one's symlinks are followed (the HF cache's snapshot files
    are links into its blobs/), where a run dir's are refused (trainer.storage.local)."""
    storage = open_run_storage(source)
    if isinstance(storage, LocalStorage):
        return LocalStorage(source, follow_links=True)
    return storage


def read_uri_bytes(uri: str) -> bytes:
    """A data file's bytes from a local path or an s3://bucket/key URI."""
    return read_s3_object(uri) if uri.startswith(S3_SCHEME) else read_local_file(uri)
