"""A run dir under s3://bucket/prefix, through boto3 with botocore's bounded retries."""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.storage.base import (
    RangeRead,
    RunStorage,
    StorageError,
    StorageNotFoundError,
    clean_rel,
    refuse_root,
)

if TYPE_CHECKING:  # boto3 is imported lazily: local runs never pay for it.
    from botocore.client import BaseClient as S3Client

S3_SCHEME = "s3://"
DEFAULT_RETRY_MODE = "standard"
DEFAULT_MAX_ATTEMPTS = 10
"""Total attempts per request, the first included. Checkpoints are expensive to lose: more
patience than botocore's default of 3."""
RETRY_MODES = ("standard", "adaptive", "legacy")


def split_s3_uri(uri: str) -> tuple[str, str]:
    """'s3://bucket/a/b' -> ('bucket', 'a/b'); a clear error when there is no bucket."""
    if not uri.startswith(S3_SCHEME):
        raise StorageError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len(S3_SCHEME) :].partition("/")
    if not bucket:
        raise StorageError(f"{uri!r} has no bucket: expected s3://bucket/prefix")
    return bucket, key.strip("/")


def _retry_settings() -> dict[str, Any]:
    mode = os.environ.get("AWS_RETRY_MODE", DEFAULT_RETRY_MODE)
    if mode not in RETRY_MODES:
        raise StorageError(f"AWS_RETRY_MODE={mode!r}: allowed values are {', '.join(RETRY_MODES)}")
    raw = os.environ.get("AWS_MAX_ATTEMPTS", str(DEFAULT_MAX_ATTEMPTS))
    if not raw.isdigit() or int(raw) < 1:
        raise StorageError(f"AWS_MAX_ATTEMPTS={raw!r}: must be a whole number >= 1")
    # AWS_MAX_ATTEMPTS counts the first attempt too; Config's own "max_attempts" would not.
    return {"mode": mode, "total_max_attempts": int(raw)}


def make_s3_client() -> S3Client:
    """An S3 client with bounded botocore retries; endpoint and credentials from the env.

    One client per distinct AWS_* environment is reused (clients are thread-safe and cost
    ~0.2 s each to build); a changed environment gets a fresh one.
    """
    retries = _retry_settings()
    aws_env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    return _client_for(aws_env, tuple(retries.items()), os.environ.get("RANK"))


@functools.lru_cache(maxsize=4)
def _client_for(aws_env: tuple, retries: tuple, rank: str | None) -> S3Client:
    import boto3  # lazy: boto3; local runs never load it
    from botocore.config import Config  # lazy: boto3; local runs never load it

    # The rank rides in the User-Agent, so S3 access logs (and the tests' proxy) can tell
    # which rank read or wrote what.
    agent = f"trainstack-rank/{rank}" if rank is not None else None
    config = Config(
        retries=dict(retries), connect_timeout=10, read_timeout=120, user_agent_extra=agent
    )
    with s3_errors("connect to", "S3"):
        try:
            return boto3.session.Session().client("s3", config=config)
        except ValueError as exc:  # botocore's word for a malformed endpoint URL
            raise StorageError(f"cannot connect to S3: {exc} (check AWS_ENDPOINT_URL_S3)") from exc


def _describe(exc: BaseException) -> str:
    """One line for a botocore/boto3 error: code, HTTP status, attempts, message."""
    response = getattr(exc, "response", None)
    if response is None and exc.__cause__ is not None:
        response = getattr(exc.__cause__, "response", None)
    if not isinstance(response, dict):
        return " ".join(str(exc).split())
    error = response.get("Error", {})
    meta = response.get("ResponseMetadata", {})
    code = error.get("Code") or "error"
    status = meta.get("HTTPStatusCode")
    text = f"{code}" + (f" (HTTP {status})" if status else "")
    attempts = meta.get("RetryAttempts")
    if attempts:
        text += f" after {attempts + 1} attempts"
    message = error.get("Message")
    return f"{text}: {message}" if message else text


def _is_not_found(exc: BaseException) -> bool:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


@contextmanager
def s3_errors(action: str, uri: str) -> Iterator[None]:
    """Translate botocore/boto3 errors at the boundary into one StorageError line."""
    from boto3.exceptions import Boto3Error  # lazy: boto3; local runs never load it
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
    )  # lazy: boto3; local runs never load it

    try:
        yield
    except StorageError:
        raise
    except ClientError as exc:
        error_cls = StorageNotFoundError if _is_not_found(exc) else StorageError
        raise error_cls(f"cannot {action} {uri}: {_describe(exc)}") from exc
    except (BotoCoreError, Boto3Error) as exc:
        raise StorageError(f"cannot {action} {uri}: {_describe(exc)}") from exc


class S3Storage(RunStorage):
    """A run dir under s3://bucket/prefix. `transfer_config` (boto3's TransferConfig) tunes
    multipart sizes and concurrency; the defaults suit checkpoints."""

    is_remote = True

    def __init__(self, run_dir: str, client: S3Client | None = None, transfer_config: Any = None):
        self.bucket, self.prefix = split_s3_uri(run_dir)
        self.root = f"{S3_SCHEME}{self.bucket}/{self.prefix}".rstrip("/")
        self._client = client or make_s3_client()
        self._transfer_config = transfer_config
        self._appended: dict[str, bytes] = {}
        """Content of objects this instance appends to, so an append needs no GET."""

    def key(self, rel: str) -> str:
        return "/".join(p for p in (self.prefix, clean_rel(rel)) if p)

    def _dir_prefix(self, rel: str) -> str:
        key = self.key(rel)
        return f"{key}/" if key else ""

    def read_bytes(self, rel: str) -> bytes:
        with s3_errors("read", self.uri(rel)):
            return _download_bytes(self._client, self.bucket, self.key(rel), self._transfer_config)

    def read_range(
        self, rel: str, start: int, end: int | None = None, tag: str | None = None
    ) -> RangeRead:
        """One ranged GET, conditional on the ETag (304: unchanged, no body); a start past
        the end (416) is read as nothing new, with the size from a HEAD."""
        from botocore.exceptions import ClientError  # lazy: boto3; local runs never load it

        if start < 0:
            wanted = f"bytes={start}"
        else:
            wanted = f"bytes={start}-" + ("" if end is None else str(max(start, end - 1)))
        request = {"Bucket": self.bucket, "Key": self.key(rel), "Range": wanted}
        if tag is not None:
            request["IfNoneMatch"] = tag
        with s3_errors("read", self.uri(rel)):
            try:
                response = self._client.get_object(**request)
            except ClientError as exc:
                status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
                if status == 304:
                    return RangeRead(None, start, None, tag)
                if status != 416:
                    raise
                head = self._client.head_object(Bucket=self.bucket, Key=self.key(rel))
                size = head["ContentLength"]
                return RangeRead(b"", min(max(start, 0), size), size, head.get("ETag"))
            data = response["Body"].read()
        total = response.get("ContentRange", "").rpartition("/")[2]
        size = int(total) if total.isdigit() else None
        begin = int(response.get("ContentRange", "bytes 0-").split()[1].split("-")[0] or 0)
        if end is not None and start >= 0 and end <= start:
            data = b""
        return RangeRead(data, begin, size, response.get("ETag"))

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._forget_appended(self.key(rel))
        with s3_errors("write", self.uri(rel)):
            self._client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data)

    def append_text(self, rel: str, text: str) -> None:
        # S3 has no append: the whole object is rewritten. This instance is the only writer
        # (rank 0), so after one read the content stays in memory and each append is one PUT
        # of the file so far: fine for metrics.jsonl (a few MB over a long run).
        key = self.key(rel)
        current = self._appended.get(key)
        if current is None:
            try:
                current = self.read_bytes(rel)
            except StorageNotFoundError:
                current = b""
        data = current + text.encode("utf-8")
        self.write_bytes(rel, data)
        self._appended[key] = data

    def _forget_appended(self, key: str) -> None:
        """Another write replaced or removed `key` (or the tree under it): drop cached text."""
        for cached in [k for k in self._appended if k == key or k.startswith(f"{key}/")]:
            del self._appended[cached]

    def exists(self, rel: str) -> bool:
        rel = clean_rel(rel)
        with s3_errors("check", self.uri(rel)):
            if rel:
                try:
                    self._client.head_object(Bucket=self.bucket, Key=self.key(rel))
                    return True
                except Exception as exc:
                    if not _is_not_found(exc):
                        raise
            listing = self._client.list_objects_v2(
                Bucket=self.bucket, Prefix=self._dir_prefix(rel), MaxKeys=1
            )
            return listing.get("KeyCount", 0) > 0

    def list_dir(self, rel: str) -> list[str]:
        prefix = self._dir_prefix(rel)
        names: set[str] = set()
        with s3_errors("list", self.uri(rel)):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, Delimiter="/"
            )
            for page in pages:
                names.update(
                    p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])
                )
                names.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        names.discard("")
        return sorted(names)

    @property
    def client(self) -> S3Client:
        """The boto3 client (thread-safe), for callers that stream objects themselves."""
        return self._client

    def file_sizes(self, rel: str) -> dict[str, int]:
        prefix = self._dir_prefix(rel)
        with s3_errors("list", self.uri(rel)):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            return {
                o["Key"][len(prefix) :]: o["Size"]
                for page in pages
                for o in page.get("Contents", [])
                if not o["Key"].endswith("/")
            }

    def abort_uploads(self, rel: str) -> None:
        prefix = self._dir_prefix(rel)
        with s3_errors("abort uploads under", self.uri(rel)):
            pages = self._client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                for upload in page.get("Uploads", []):
                    self._client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )

    def _keys_under(self, rel: str) -> list[str]:
        prefix = self._dir_prefix(rel)
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def _upload(self, pairs: list[tuple[Path, str]], target: str) -> None:
        # The transfer manager runs the uploads concurrently and splits big files into
        # multipart uploads, which it aborts on failure (no half object ever appears).
        with s3_errors("upload to", target):
            for source, rel in pairs:
                if not source.is_file():
                    raise StorageNotFoundError(f"cannot upload {source}: no such file")
                self._forget_appended(self.key(rel))
            with _transfer_manager(self._client, self._transfer_config) as manager:
                futures = [
                    manager.upload(str(source), self.bucket, self.key(rel)) for source, rel in pairs
                ]
                for future in futures:
                    future.result()

    def download_dir(self, rel: str, local_dir: Path) -> None:
        prefix = self._dir_prefix(rel)
        local_dir = Path(local_dir)
        with s3_errors("download", self.uri(rel)):
            keys = self._keys_under(rel)
            if not keys:
                raise StorageNotFoundError(f"cannot download {self.uri(rel)}: nothing there")
            with _transfer_manager(self._client, self._transfer_config) as manager:
                futures = []
                for key in keys:
                    if key.endswith("/"):
                        continue  # a "folder" placeholder made by a console, not a file
                    target = local_dir / clean_rel(key[len(prefix) :])
                    target.parent.mkdir(parents=True, exist_ok=True)
                    futures.append(manager.download(self.bucket, key, str(target)))
                for future in futures:
                    future.result()

    def delete_tree(self, rel: str) -> None:
        rel = clean_rel(rel)
        refuse_root(self, rel)
        self._forget_appended(self.key(rel))
        with s3_errors("delete", self.uri(rel)):
            keys = [self.key(rel), *self._keys_under(rel)]
            for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
                batch = [{"Key": k} for k in keys[start : start + 1000]]
                response = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
                if response.get("Errors"):
                    first = response["Errors"][0]
                    raise StorageError(
                        f"cannot delete {S3_SCHEME}{self.bucket}/{first.get('Key')}: "
                        f"{first.get('Code')}: {first.get('Message')}"
                    )


def _transfer_manager(client: Any, config: Any = None) -> Any:
    from boto3.s3.transfer import (
        TransferConfig,
        create_transfer_manager,
    )  # lazy: boto3; local runs never load it

    return create_transfer_manager(client, config or TransferConfig())


def _download_bytes(client: Any, bucket: str, key: str, config: Any = None) -> bytes:
    """Reads go through the transfer manager too: botocore retries a failed request, but only
    s3transfer retries a body cut off midway (and it fetches large objects in parallel)."""
    buffer = io.BytesIO()
    with _transfer_manager(client, config) as manager:
        manager.download(bucket, key, buffer).result()
    return buffer.getvalue()


def read_s3_object(uri: str) -> bytes:
    """A data file's bytes from s3://bucket/key."""
    bucket, key = split_s3_uri(uri)
    if not key:
        raise StorageError(f"{uri!r} names a bucket but no object: expected s3://bucket/key")
    with s3_errors("read", uri):
        return _download_bytes(make_s3_client(), bucket, key)
