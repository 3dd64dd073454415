"""DCP straight to and from S3, through s3torchconnector's `S3StorageWriter` /
`S3StorageReader` (AWS's CRT-based client).

- Saves stream each rank's shard from the staged CPU copy into a multipart upload: no file on
  local disk at all (the previous path wrote every shard to a staging directory, then uploaded).
- Loads read, on each rank, only the byte ranges that rank's state needs, with ranged GETs
  (the connector's DCP-optimised reader sorts the load plan by offset and coalesces
  neighbouring ranges); nothing is downloaded whole and nothing touches local disk.

The connector's DCP classes do not take an endpoint, so the file system behind them is swapped
for one on a client built here (its `S3Client` and `UserAgent` live in private modules: the
version is pinned in constraints.txt) from the same environment boto3 reads: `AWS_ENDPOINT_URL_S3` /
`AWS_ENDPOINT_URL` (path-style addressing then, as S3-compatible endpoints need; checked
against moto over plain HTTP on 127.0.0.1), the region, and `AWS_MAX_ATTEMPTS` for the CRT's
own retries. Credentials come from the CRT's default chain (environment, profile, web
identity, container credentials as EKS Pod Identity provides).
"""

from __future__ import annotations

import functools
import os
from typing import Any

# Imported at module level (this module itself loads only for S3 run dirs), so the image's
# self-test, which imports every trainer module, catches a missing connector.
from s3torchconnector import S3ClientConfig, S3ReaderConstructor
from s3torchconnector._s3client import S3Client
from s3torchconnector._user_agent import UserAgent
from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
from s3torchconnector.dcp.s3_file_system import S3FileSystem

from trainer.storage.s3 import DEFAULT_MAX_ATTEMPTS, S3Storage

DEFAULT_REGION = "us-east-1"


def _settings() -> tuple[str, str | None, int, str | None]:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    attempts = os.environ.get("AWS_MAX_ATTEMPTS", "")
    return (
        region or DEFAULT_REGION,
        endpoint,
        int(attempts) if attempts.isdigit() and int(attempts) > 0 else DEFAULT_MAX_ATTEMPTS,
        os.environ.get("RANK"),
    )


@functools.lru_cache(maxsize=2)
def _client(region: str, endpoint: str | None, attempts: int, rank: str | None) -> Any:
    config = S3ClientConfig(force_path_style=endpoint is not None, max_attempts=attempts)
    agent = UserAgent(["trainstack-dcp", *([f"trainstack-rank/{rank}"] if rank else [])])
    return S3Client(region=region, endpoint=endpoint, user_agent=agent, s3client_config=config)


def s3_client() -> Any:
    """The CRT client for this process's environment (shared; `model.init_from` reads with
    it too)."""
    return _client(*_settings())


def _file_system(reader_constructor: Any = None) -> Any:
    return S3FileSystem(
        _settings()[0], s3_client=s3_client(), reader_constructor=reader_constructor
    )


def s3_writer(storage: S3Storage, rel: str) -> Any:
    """A DCP StorageWriter for `rel` of an S3 run dir."""
    uri = storage.uri(rel)
    writer = S3StorageWriter(region=_settings()[0], path=uri)
    writer.fs = _file_system()
    writer.path = writer.fs.init_path(uri)
    return writer


MAX_GAP_BYTES = 0
"""Ranges a rank needs are merged into one GET only when adjacent. The connector's default
(32 MiB gaps) made each rank also fetch most of the other ranks' shard files: the replicated
entries (each optimizer `step` scalar) sit, deduplicated, between other ranks' shards. Measured
with benchmarks/bench_checkpoint.py at 2 ranks: 32 MiB gaps had rank 0 fetch 83% of the whole
checkpoint in 27 GETs; 0 fetches 50% in 73 GETs. A rank reads nothing it does not need, at the
cost of one small GET per such scalar run."""


def s3_reader(storage: S3Storage, rel: str) -> Any:
    """A DCP StorageReader for `rel` of an S3 run dir (ranged reads only)."""
    uri = storage.uri(rel)
    constructor = S3ReaderConstructor.dcp_optimized(max_gap_size=MAX_GAP_BYTES)
    reader = S3StorageReader(region=_settings()[0], path=uri, reader_constructor=constructor)
    reader.fs = _file_system(reader._reader_constructor)
    reader.path = reader.fs.init_path(uri)
    return reader
