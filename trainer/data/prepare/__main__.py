"""`python -m trainer.data.prepare --to URI --data JSON [--slices N] [--index I | --finalize]`

Without --index/--finalize: the whole prepare here. With --index (or JOB_COMPLETION_INDEX, as
an Indexed Job's pod has it): that slice only. --finalize: the commit once every slice landed.
Bad input is one line on stderr and exit 2; nothing is committed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from contract.config import DataConfig
from trainer.errors import ConfigError
from trainer.storage import StorageError

EXIT_BAD_INPUT = 2
"""Bad input: an Indexed Job fails the index instead of retrying it (podFailurePolicy)."""
EXIT_STORAGE = 1
"""Storage failed after botocore's retries: worth another attempt of the index."""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainer.data.prepare")
    parser.add_argument("--to", required=True, help="output: a directory or s3://bucket/prefix")
    parser.add_argument("--data", required=True, help="the data.* section as JSON")
    parser.add_argument("--slices", type=int, default=1)
    parser.add_argument("--index", type=int, default=None)
    parser.add_argument("--finalize", action="store_true")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--chunk-mb", type=float, default=16.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    from trainer.data.prepare import (
        PrepareRequest,
        finalize,
        prepare,
        run_slice,
    )  # lazy: torch via the tokenizer, after argument parsing

    index = args.index
    if index is None and "JOB_COMPLETION_INDEX" in os.environ and not args.finalize:
        index = int(os.environ["JOB_COMPLETION_INDEX"])
    try:
        request = PrepareRequest(
            data=DataConfig(**json.loads(args.data)),
            to=args.to,
            slices=args.slices,
            workers=args.workers,
            chunk_mb=args.chunk_mb,
        )
        if args.finalize:
            summary = finalize(request)
        elif index is not None:
            summary = run_slice(request, index)
        else:
            summary = prepare(request)
    except ConfigError as exc:
        print(f"data prepare: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StorageError as exc:
        print(f"data prepare: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_STORAGE
    print(summary.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
