"""The cluster's model initializer: `python -m trainer.hf.hub_cache hf://org/name[@rev] DEST
[--wait SECONDS]` puts a Hub model into the run storage cache DEST (s3://.../models/<org--name>/
<revision>) once: a cache holding the completion marker is left alone; otherwise the files are
downloaded into the pod's scratch space and uploaded, the marker last. With --wait (the other
pods of a job) it only waits for the marker. Exit 0 when the cache is complete, 2 on bad input
or a refused download, 1 when the wait times out."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from trainer.errors import ConfigError
from trainer.hf.hub import download, parse_hub
from trainer.storage import StorageError, open_run_storage

MARKER = ".trainstack-complete.json"
POLL_S = 10.0


def is_complete(dest: str) -> bool:
    return open_run_storage(dest).exists(MARKER)


def fill(source: str, dest: str) -> str:
    """Download `source` and upload it under `dest` unless already there; returns what it did."""
    model = parse_hub(source)
    if is_complete(dest):
        return f"{source} already cached at {dest}"
    storage = open_run_storage(dest)
    with tempfile.TemporaryDirectory(prefix="trainstack-hub-") as scratch:
        local = Path(download(source, local_dir=scratch))
        files = sorted(p for p in local.iterdir() if p.is_file())
        for path in files:
            storage.upload_file(path, path.name)
    marker = {"repo_id": model.repo_id, "revision": model.revision, "files": len(files)}
    storage.write_bytes(MARKER, json.dumps(marker).encode())
    return f"cached {source} at {dest}: {len(files)} files"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.hf.hub_cache")
    parser.add_argument("source")
    parser.add_argument("dest")
    parser.add_argument("--wait", type=float, default=None, metavar="SECONDS")
    args = parser.parse_args(argv)
    try:
        if args.wait is None:
            print(f"[model-initializer] {fill(args.source, args.dest)}", flush=True)
            return 0
        deadline = time.monotonic() + args.wait
        while not is_complete(args.dest):
            if time.monotonic() > deadline:
                print(f"error: {args.dest}: no complete model after {args.wait:.0f}s",
                      file=sys.stderr)  # fmt: skip
                return 1
            time.sleep(POLL_S)
        return 0
    except (ConfigError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
