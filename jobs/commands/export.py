"""`trainstack export RUN [--step N] --to DIR|s3://... [--dtype bf16|fp32] [--merge]
[overrides ...]`: a committed checkpoint of a run as a Hugging Face directory (config.json,
sharded safetensors and index, tokenizer, generation_config.json), written on this machine with
no process group. A LoRA run gives a PEFT adapter directory, or with --merge full weights.

RUN is a run id under `storage.root` (overrides such as `stack=prod` select it) or a run dir
(a path or s3:// URI). Bad input is one line and exit 2, with nothing written.
"""

from __future__ import annotations

import argparse

from jobs.backends.base import BackendError
from jobs.commands.run_lookup import existing_run_dir, fail


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="run id, or a run dir (path or s3://)")
    parser.add_argument(
        "--to", required=True, metavar="DIR", help="a new directory or s3:// prefix"
    )
    parser.add_argument("--step", type=int, help="checkpoint step (default: the newest committed)")
    parser.add_argument("--dtype", default="bf16", help="bf16 (default) or fp32")
    parser.add_argument(
        "--max-shard-gb", type=float, default=2.0, help="safetensors shard size (GiB)"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="a LoRA run: write the base with the adapters merged (default: a PEFT adapter)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        default=[],
        help="config overrides selecting where runs are, e.g. stack=prod",
    )


def run(args: argparse.Namespace) -> int:
    from contract.config import EXIT_BAD_INPUT  # lazy: completion loads this module
    from trainer.errors import ConfigError  # lazy: completion loads this module
    from trainer.hf.export import export_run  # lazy: torch, for the export alone
    from trainer.storage import StorageError  # lazy: completion loads this module

    if args.max_shard_gb <= 0:
        return fail("export", "--max-shard-gb: must be > 0", EXIT_BAD_INPUT)
    try:
        result = export_run(
            existing_run_dir(args.run_id, args.overrides),
            args.to,
            step=args.step,
            dtype=args.dtype,
            max_shard_bytes=int(args.max_shard_gb * 2**30),
            merge=args.merge,
        )
    except ConfigError as err:
        return fail("export", str(err), EXIT_BAD_INPUT)
    except (BackendError, StorageError) as err:
        return fail("export", str(err))
    print(
        f"exported step {result.step} of {args.run_id} to {result.destination}: "
        f"{result.files} files, {result.bytes_written / 2**20:,.1f} MiB of weights ({args.dtype})"
    )
    return 0
