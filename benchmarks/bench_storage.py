"""Run-dir storage throughput: what atomic local writes cost, what the S3 transfer manager buys.

Local: `write_bytes` (temp file, fsync, rename) against a plain write + fsync of the same
bytes to a new file on the same disk.

S3: a rank's checkpoint shard (one large file) through `upload_file` / `download_dir` (boto3's
transfer manager: multipart, parts in parallel) against one put_object / get_object of the same
bytes. Loopback to moto has no latency and no per-connection bandwidth limit, which is what
makes parallel parts pay off on real S3, so both go through `FaultProxy` with a `Link` that
models one connection as LINK_LATENCY_S per request plus LINK_MIB_S of bandwidth (the rough
shape of a single S3 connection from EC2; the figures are relative, not AWS throughput). moto
runs in its own process so it does not share this process's GIL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path

from testing_support.s3_server import FaultProxy, Link, s3_env
from trainer.storage import LocalStorage, S3Storage
from trainer.storage.s3 import make_s3_client

MIB = 1024 * 1024
LOCAL_MIB = 64
SHARD_MIB = 48
LINK_LATENCY_S = 0.03
LINK_MIB_S = 40.0
REPEATS = 3
LOCAL_REPEATS = 6
TARGET_ATOMIC_RATIO = 0.8
"""Atomic local writes keep at least this fraction of a plain write's speed."""
TARGET_TRANSFER_RATIO = 1.5
"""Parallel multipart transfers beat one request per file by at least this factor."""


def _seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _best_seconds(action: Callable[[int], object]) -> float:
    best = float("inf")
    for attempt in range(REPEATS):
        started = time.perf_counter()
        action(attempt)
        best = min(best, time.perf_counter() - started)
    return best


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    """moto_server in its own process (its own GIL) on a free port; (process, url)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    moto = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(moto), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto_server did not start within 30 s")


def _local(work: Path) -> dict[str, float]:
    payload = os.urandom(LOCAL_MIB * MIB)
    storage = LocalStorage(work / "run")

    def plain_write(attempt: int) -> None:
        with open(work / f"plain-{attempt}.bin", "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())

    # Alternate the two, best of LOCAL_REPEATS each: the disk is shared and its speed drifts.
    plain = atomic = float("inf")
    for attempt in range(LOCAL_REPEATS):
        plain = min(plain, _seconds(partial(plain_write, attempt)))
        atomic = min(atomic, _seconds(partial(storage.write_bytes, f"blob-{attempt}", payload)))
        (work / f"plain-{attempt}.bin").unlink()
        storage.delete_tree(f"blob-{attempt}")
    return {
        "local_plain_write_mib_s": LOCAL_MIB / plain,
        "local_atomic_write_mib_s": LOCAL_MIB / atomic,
    }


def _s3(work: Path) -> dict[str, float]:
    shard = work / "staging" / "__0_0.distcp"
    shard.parent.mkdir()
    shard.write_bytes(os.urandom(SHARD_MIB * MIB))
    moto, moto_url = start_moto()
    proxy = FaultProxy(moto_url, link=Link(LINK_LATENCY_S, LINK_MIB_S)).start()
    saved = dict(os.environ)
    try:
        os.environ.update(s3_env(proxy.url))
        storage = S3Storage("s3://bench-bucket/run")
        client = make_s3_client()
        client.create_bucket(Bucket="bench-bucket")

        def single_put(attempt: int) -> None:
            client.put_object(
                Bucket="bench-bucket", Key=f"single/{attempt}", Body=shard.read_bytes()
            )

        def single_get(attempt: int) -> None:
            body = client.get_object(Bucket="bench-bucket", Key=f"single/{attempt}")["Body"]
            (work / f"single-{attempt}.bin").write_bytes(body.read())

        def upload(attempt: int) -> None:
            storage.upload_file(shard, f"checkpoints/step-{attempt:08d}/{shard.name}")

        def download(attempt: int) -> None:
            storage.download_dir(f"checkpoints/step-{attempt:08d}", work / f"restored-{attempt}")

        put, upload_s = _best_seconds(single_put), _best_seconds(upload)
        get, download_s = _best_seconds(single_get), _best_seconds(download)
        assert (work / "restored-0" / shard.name).read_bytes() == shard.read_bytes()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        proxy.stop()
        moto.terminate()
        moto.wait(timeout=30)
    return {
        "s3_single_put_mib_s": SHARD_MIB / put,
        "s3_upload_file_mib_s": SHARD_MIB / upload_s,
        "s3_single_get_mib_s": SHARD_MIB / get,
        "s3_download_dir_mib_s": SHARD_MIB / download_s,
    }


def _check(value: float, target: float) -> dict:
    return {"value": round(value, 2), "target": f">= {target}", "ok": value >= target}


def run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        figures = {**_local(Path(tmp)), **_s3(Path(tmp))}
    result: dict = {k: round(v, 1) for k, v in figures.items()}
    result["link_model"] = {"latency_s": LINK_LATENCY_S, "mib_per_s": LINK_MIB_S}
    result["checks"] = {
        "local_atomic_vs_plain_write": _check(
            figures["local_atomic_write_mib_s"] / figures["local_plain_write_mib_s"],
            TARGET_ATOMIC_RATIO,
        ),
        "s3_upload_file_vs_single_put": _check(
            figures["s3_upload_file_mib_s"] / figures["s3_single_put_mib_s"],
            TARGET_TRANSFER_RATIO,
        ),
        "s3_download_dir_vs_single_get": _check(
            figures["s3_download_dir_mib_s"] / figures["s3_single_get_mib_s"],
            TARGET_TRANSFER_RATIO,
        ),
    }
    return result
