"""`python -m trainer.serving.fetch s3://<bucket>/runs/<run>/export DIR`: the serving pod's init
container (jobs/backends/kubernetes/serving.py) copies a run's export, and nothing else, into
the emptyDir vLLM reads. Its role may read that prefix alone (infra/serving.py), so the copy
lists and reads below it only. Exit 2 for a missing export, 1 for any other storage failure."""

from __future__ import annotations

import sys
from pathlib import Path

from trainer.storage import StorageError, StorageNotFoundError, open_run_storage


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m trainer.serving.fetch EXPORT_URI DIR", file=sys.stderr)
        return 2
    source, dest = argv
    try:
        open_run_storage(source).download_dir("", Path(dest))
    except StorageNotFoundError as err:
        print(f"fetch: {err}", file=sys.stderr)
        return 2
    except StorageError as err:
        print(f"fetch: {err}", file=sys.stderr)
        return 1
    print(f"fetch: {source} -> {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
