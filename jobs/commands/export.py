"""`trainstack export RUN [--step N] --to DIR|s3://... [--dtype bf16|fp32] [--merge]
[overrides ...]`: a committed checkpoint of a run as a Hugging Face directory (config.json,
sharded safetensors and index, tokenizer, generation_config.json), written on this machine with
no process group. A LoRA run gives a PEFT adapter directory, or with --merge full weights.

RUN is a run id under `storage.root` (overrides such as `stack=prod` select it) or a run dir
(a path or s3:// URI). Bad input is one line and exit 2, with nothing written.
"""

from __future__ import annotations

import argparse

from contract.config import EXIT_BAD_INPUT
from jobs.backends.base import BackendError
from jobs.commands import arguments
from jobs.commands.run_lookup import existing_run_dir, fail
from trainer.errors import ConfigError
from trainer.storage import StorageError

add_arguments = arguments.export
"""The CLI builds the parser with it; completion reads jobs.commands.arguments alone."""


def run(args: argparse.Namespace) -> int:
    from trainer.hf.export import export_run  # lazy: torch (seconds); bad flags answer first

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
