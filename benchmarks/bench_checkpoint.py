"""Checkpoints on S3 at 2 and 4 ranks: bytes each rank fetches to resume, local disk used,
save and resume seconds — the trainer's path against the one it replaced.

A model of ~230 MB of state (19M fp32 parameters + AdamW's two moments), sharded with FSDP2,
one optimizer step taken, saved and loaded through moto behind `FaultProxy`, which counts the
body bytes of every request and, from the User-Agent, the rank that sent it.

- current: `Checkpointer.save` / `Checkpointer.load` (s3torchconnector: shards streamed to S3
  from the staged CPU copy; ranged GETs of only what each rank needs).
- previous (kept here only, to measure against): DCP's FileSystemWriter into a local staging
  directory, each rank uploading its files, and on load every rank downloading the whole
  checkpoint directory with the transfer manager, then DCP's FileSystemReader.

Local disk: the staging directory's size, polled every 20 ms while saving/resuming (its peak),
and the bytes the rank's process wrote to block devices (/proc/self/io write_bytes).
Workers run under torchrun as `python benchmarks/bench_checkpoint.py OUT_JSON`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORLD_SIZES = (2, 4)
MODEL = dict(dim=512, n_layers=6, n_heads=8, n_kv_heads=4, ffn_hidden_dim=1536)
BUCKET = "bench-checkpoint"
TARGET_READ_RATIO = 1.2
"""Each rank fetches at most this x (shard bytes / world size), plus the metadata."""


def run() -> dict:
    from benchmarks.bench_storage import start_moto
    from testing_support.s3_server import FaultProxy, s3_env

    moto, moto_url = start_moto()
    proxy = FaultProxy(moto_url).start()
    result: dict = {"model": MODEL, "checks": {}}
    try:
        client = _client(moto_url, s3_env)
        client.create_bucket(Bucket=BUCKET)
        for nproc in WORLD_SIZES:
            with tempfile.TemporaryDirectory() as tmp:
                figures = _measure(nproc, Path(tmp), proxy, s3_env(proxy.url))
            result[f"ranks_{nproc}"] = figures
            _empty(client)
            limit = figures["read_limit_bytes_per_rank"]
            worst = max(figures["current"]["resume_bytes_per_rank"])
            result["checks"][f"resume_bytes_per_rank_{nproc}_ranks"] = {
                "value": worst,
                "target": f"<= {limit}",
                "ok": worst <= limit,
            }
            disk = figures["current"]["resume_peak_staging_bytes"]
            result["checks"][f"resume_local_disk_{nproc}_ranks"] = {
                "value": disk,
                "target": "== 0",
                "ok": disk == 0,
            }
    finally:
        proxy.stop()
        moto.terminate()
        moto.wait(timeout=30)
    return result


def _client(url: str, s3_env):
    import boto3

    env = s3_env(url)
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def _empty(client) -> None:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    for page in pages:
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def _measure(nproc: int, work: Path, proxy, env: dict[str, str]) -> dict:
    out = work / "out.json"
    before = len(proxy.transfers)
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={nproc}", __file__, str(out)]
    full_env = {
        **os.environ,
        **env,
        "TRAINSTACK_STAGING_DIR": str(work / "staging"),
        "PYTHONPATH": str(REPO),  # the workers import benchmarks.bench_trainer
    }
    proc = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"checkpoint benchmark workers failed:\n{proc.stderr[-3000:]}")
    figures = json.loads(out.read_text())
    transfers = proxy.transfers[before:]
    shard_bytes, metadata_bytes = figures.pop("shard_bytes"), figures.pop("metadata_bytes")
    for path in ("current", "previous"):
        step = f"/{path}/checkpoints/step-00000001/"
        fetched, requests = [0] * nproc, [0] * nproc
        for t in transfers:
            if t.method == "GET" and step in t.path and t.rank is not None:
                fetched[t.rank] += t.received
                requests[t.rank] += 1
        figures[path]["resume_bytes_per_rank"] = fetched
        figures[path]["resume_get_requests_per_rank"] = requests
    figures["checkpoint_bytes"] = shard_bytes + metadata_bytes
    figures["metadata_bytes"] = metadata_bytes
    # Metadata may be read more than once per rank (the resume check, the saved keys, DCP):
    # allow three reads of it on top of the rank's share of the shards.
    figures["read_limit_bytes_per_rank"] = int(
        TARGET_READ_RATIO * shard_bytes / nproc + 3 * metadata_bytes
    )
    return figures


# ---- worker side: runs under torchrun ------------------------------------------------------


class _DiskWatch:
    """Peak size of a directory tree, polled; and this process's block-device writes."""

    def __init__(self, root: Path):
        self.root, self.peak, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _size(self) -> int:
        total = 0
        for dirpath, _, names in os.walk(self.root):
            for name in names:
                with contextlib.suppress(FileNotFoundError):  # removed while walking
                    total += os.stat(os.path.join(dirpath, name)).st_size
        return total

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._size())
            time.sleep(0.02)

    def __enter__(self) -> _DiskWatch:
        self._written = _write_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._size())
        self.written = _write_bytes() - self._written


def _write_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def _timed(action, *args, **kwargs) -> float:
    import torch.distributed as dist

    dist.barrier()
    started = time.perf_counter()
    action(*args, **kwargs)
    dist.barrier()
    return time.perf_counter() - started


def _previous_save(env, storage, staging: Path, rel: str, state) -> None:
    """The replaced path: DCP into local staging, then each rank uploads its own files."""
    import torch.distributed.checkpoint as dcp

    target = staging / rel
    target.mkdir(parents=True, exist_ok=True)
    dcp.save(state, checkpoint_id=str(target), process_group=env.checkpoint_group)
    mine = sorted(target.glob(f"__{env.rank}_*"))
    if env.rank == 0:
        mine.append(target / ".metadata")
    for file in mine:
        storage.upload_file(file, f"{rel}/{file.name}")
        file.unlink()
    env.barrier()
    if env.rank == 0:
        storage.write_text(f"{rel}/COMMITTED", "1\n")


def _previous_load(env, storage, staging: Path, rel: str, state) -> None:
    """The replaced path: every rank downloads the whole checkpoint, then loads from disk."""
    import torch.distributed.checkpoint as dcp

    cache = staging / f"load-rank{env.rank}"
    try:
        storage.download_dir(rel, cache / rel)
        dcp.load(state, checkpoint_id=str(cache / rel), process_group=env.checkpoint_group)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _worker(out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from benchmarks.bench_trainer import _build, _step
    from contract.config import CheckpointConfig
    from trainer.checkpoint import Checkpointer
    from trainer.distributed import init_distributed
    from trainer.storage import open_run_storage

    env = init_distributed()
    staging = Path(os.environ["TRAINSTACK_STAGING_DIR"])
    staging.mkdir(parents=True, exist_ok=True)
    model, optimizer = _build(MODEL, env)  # the trainer benchmark's FSDP2 set-up
    _step(model, optimizer, torch.randint(0, model.args.vocab_size, (2, 33)))  # AdamW state

    def state() -> dict:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def moments(sd: dict) -> list:
        return [value["exp_avg"].to_local() for value in sd["optim"]["state"].values()]

    def checksum(sd: dict) -> float:
        return float(sum(m.double().abs().sum() for m in moments(sd)))

    expected = checksum(state())
    rel = "checkpoints/step-00000001"
    figures: dict = {}
    for path in ("current", "previous"):
        storage = open_run_storage(f"s3://{BUCKET}/{path}")
        checkpointer = Checkpointer(storage, env, CheckpointConfig())
        if path == "current":
            save, load = (
                partial(checkpointer.save, 1, asynchronous=False),
                partial(checkpointer.load, 1),
            )
        else:
            save = partial(_previous_save, env, storage, staging, rel)
            load = partial(_previous_load, env, storage, staging, rel)
        with _DiskWatch(staging) as save_disk:
            save_s = _timed(save, state())
        target = state()
        for moment in moments(target):  # forget, so only the load can bring them back
            moment.zero_()
        with _DiskWatch(staging) as load_disk:
            resume_s = _timed(load, target)
        assert checksum(target) == expected, f"{path}: the loaded state differs from the saved one"
        checkpointer.close()
        figures[path] = _gathered(
            env,
            save_seconds=save_s,
            resume_seconds=resume_s,
            save_peak_staging_bytes=save_disk.peak,
            resume_peak_staging_bytes=load_disk.peak,
            resume_disk_write_bytes=load_disk.written,
        )
    if env.rank == 0:
        sizes = open_run_storage(f"s3://{BUCKET}/current").file_sizes(rel)
        figures["shard_bytes"] = sum(v for k, v in sizes.items() if k.endswith(".distcp"))
        figures["metadata_bytes"] = sizes[".metadata"]
        figures["state_bytes"] = model.args.num_params() * 4 * 3
        out.write_text(json.dumps(figures))
    dist.barrier()
    dist.destroy_process_group()


def _gathered(env, **mine) -> dict:
    """Seconds: the slowest rank; disk figures: the largest rank's."""
    import torch.distributed as dist

    everyone: list = [None] * env.world_size
    dist.all_gather_object(everyone, mine)
    merged = {key: max(r[key] for r in everyone) for key in mine}
    return {k: round(v, 2) if k.endswith("seconds") else v for k, v in merged.items()}


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
