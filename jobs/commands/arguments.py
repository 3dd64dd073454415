"""Each heavy command's arguments, apart from what running it needs: tab completion
(jobs/completion.py) builds a command's parser from here without loading the command, and the
command module adds the same arguments (`trainstack <cmd> --help` reads them). A command whose
module is light keeps its `add_arguments` in it (ADD_ARGUMENTS lists the others).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

DEFAULT_SLICES = 16
"""`trainstack data prepare --slices` on Kubernetes when not given."""
TOKEN_HASHES_ENV = "TRAINSTACK_API_TOKEN_HASHES"
"""`trainstack serve --token-hashes` when not given."""
ADMINS_ENV = "TRAINSTACK_API_ADMINS"
"""`trainstack serve --admin` when not given (comma-separated)."""


def data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["prepare"], help="prepare: JSONL -> token shards")
    parser.add_argument("--to", required=True, help="output dataset: a directory or s3://...")
    parser.add_argument(
        "--slices",
        type=int,
        default=None,
        help=f"parts of the sources (kubernetes: Job indexes; default {DEFAULT_SLICES}; local: 1)",
    )
    parser.add_argument("--parallelism", type=int, default=8, help="kubernetes: pods at once")
    parser.add_argument("--retries", type=int, default=3, help="kubernetes: retries per slice")
    parser.add_argument("--cpus", type=int, default=8, help="kubernetes: CPUs (workers) per pod")
    parser.add_argument("--memory", default="16Gi", help="kubernetes: memory per pod")
    parser.add_argument("--workers", type=int, default=0, help="local: processes (0: all CPUs)")
    parser.add_argument("--chunk-mb", type=float, default=16.0, help="MB of text per shard")
    parser.add_argument("--dryrun", action="store_true", help="print the Job YAML only")
    parser.add_argument("--wait", action="store_true", help="kubernetes: follow to the end")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data.path=s3://...")


def export(parser: argparse.ArgumentParser) -> None:
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


def checkpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run id, or a run dir (path or s3:// URI)")
    parser.add_argument(
        "overrides",
        nargs="*",
        default=[],
        help="config overrides selecting storage.root, e.g. stack=prod",
    )


def serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--token-hashes",
        type=Path,
        default=os.environ.get(TOKEN_HASHES_ENV),
        metavar="DIR",
        help=f"directory of SHA-256 token hashes (default ${TOKEN_HASHES_ENV})",
    )
    parser.add_argument(
        "--admin",
        action="append",
        default=[n for n in os.environ.get(ADMINS_ENV, "").split(",") if n],
        metavar="NAME",
        help=f"a user who may cancel anyone's runs (repeatable; default ${ADMINS_ENV}, "
        "comma-separated)",
    )
    parser.add_argument("--no-auth", action="store_true", help="no tokens (loopback only)")
    parser.add_argument("--hash-token", action="store_true", help="print sha256 of stdin's token")
    parser.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS: certificate")
    parser.add_argument("--tls-key", type=Path, metavar="PEM", help="serve HTTPS: private key")
    parser.add_argument(
        "--secure-cookies",
        action="store_true",
        help="cookies are Secure though this server speaks HTTP (TLS ends at a load balancer)",
    )
    parser.add_argument(
        "--allowed-hosts",
        metavar="H[,H...]",
        help="Host header values served (default: the bind address; '*': any)",
    )
    parser.add_argument(
        "--max-follows",
        type=int,
        default=None,
        metavar="N",
        help="log follows one user may hold open at a time (default 8)",
    )
    parser.add_argument("overrides", nargs="*", help="where the cluster is, e.g. stack=prod")


ADD_ARGUMENTS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "data": data,
    "export": export,
    "checkpoints": checkpoints,
    "serve": serve,
}
