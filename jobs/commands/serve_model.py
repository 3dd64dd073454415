"""`trainstack serve-model RUN [--step N] [--host H] [--port P] [--name NAME] [--dtype D]
[overrides ...]`: a run's checkpoint behind an OpenAI-compatible API on this machine
(`/v1/completions` with echo and logprobs, `/v1/chat/completions`, `/v1/models`, `/health`).

Not `trainstack serve` (the Training API). The checkpoint (default: the newest committed) is
exported to a temporary directory (a LoRA run merged), loaded with transformers, and served
until SIGINT/SIGTERM; the temporary export is removed on the way out. No authentication: it
binds to 127.0.0.1 unless --host says otherwise. `--port 0` takes a free port; the line
`serving NAME (step N) on http://HOST:PORT` says which once the model is loaded.

With `backend=render` or `backend=kubernetes` the run's export is served on the cluster by vLLM
instead, and `--down` takes it away again (jobs/commands/serve_cluster.py).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from contract.config import EXIT_BAD_INPUT
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.serving import DEFAULT_STARTUP_TIMEOUT_S, VLLM_IMAGE
from jobs.commands import serve_cluster
from jobs.commands.run_lookup import compose_for, existing_run_dir, fail
from jobs.errors import one_line
from trainer.errors import ConfigError
from trainer.storage import StorageError

DTYPES = ("fp32", "bf16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="run id, or a run dir (path or s3://)")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the newest committed)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (no auth: loopback)")
    parser.add_argument("--port", type=int, default=8000, help="0: a free port")
    parser.add_argument("--name", help="the model id clients send (default: the run id)")
    parser.add_argument("--dtype", default="fp32", help="fp32 (default) or bf16")
    parser.add_argument(
        "--down",
        action="store_true",
        help="backend=kubernetes: delete what serve-model applied for RUN",
    )
    parser.add_argument("--image", default=VLLM_IMAGE, help="cluster: the vLLM server image")
    parser.add_argument(
        "--startup-timeout",
        type=int,
        default=DEFAULT_STARTUP_TIMEOUT_S,
        metavar="S",
        help="cluster: seconds the model may take to load before the server is restarted",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        default=[],
        help="where runs are (stack=prod); backend=render|kubernetes, compute=<instance type>, "
        "compute.gpus_per_node=N serve on the cluster",
    )


def run(args: argparse.Namespace) -> int:
    try:
        cfg = compose_for(list(args.overrides))
    except (HydraException, OmegaConfBaseException) as err:
        return fail("serve-model", one_line(err), EXIT_BAD_INPUT)
    if serve_cluster.wanted(cfg):
        try:
            return serve_cluster.run(args, cfg)
        except serve_cluster.ServeInputError as err:
            return fail("serve-model", str(err), EXIT_BAD_INPUT)
        except BackendError as err:  # the cluster refused or failed (ClusterError, NotOurs)
            return fail("serve-model", str(err))
    if args.down:
        return fail("serve-model", "--down: allowed with backend=kubernetes only", EXIT_BAD_INPUT)
    if args.dtype not in DTYPES:
        return fail("serve-model", f"--dtype: {args.dtype!r}; allowed: fp32, bf16", EXIT_BAD_INPUT)
    if not 0 <= args.port <= 65535:
        return fail("serve-model", f"--port: {args.port}; allowed: 0 to 65535", EXIT_BAD_INPUT)
    try:
        run_dir = existing_run_dir(args.run_id, args.overrides)
        sock = socket.create_server((args.host, args.port))
    except BackendError as err:
        return fail("serve-model", str(err), EXIT_BAD_INPUT)
    except OSError as err:
        return fail("serve-model", f"--host/--port: cannot bind {args.host}:{args.port}: {err}", 1)
    # lazy: torch, transformers and uvicorn take seconds; bad input answers first
    import uvicorn

    from trainer.hf.export import choose_step, export_run
    from trainer.hf.export_lora import run_lora
    from trainer.serving.app import create_app
    from trainer.serving.engine import Engine
    from trainer.storage import open_run_storage

    work = Path(tempfile.mkdtemp(prefix="trainstack-serve-model-"))
    try:
        storage = open_run_storage(run_dir)
        step = choose_step(storage, args.step)
        merge = run_lora(storage) is not None
        export_run(run_dir, str(work / "model"), step=step, dtype="fp32", merge=merge)
        name = args.name or Path(run_dir.rstrip("/")).name
        engine = Engine(work / "model", name, dtype=args.dtype)
        host, port = sock.getsockname()[:2]
        print(f"serving {name} (step {step}) on http://{host}:{port}", flush=True)
        config = uvicorn.Config(create_app(engine), log_level="warning", access_log=False)
        uvicorn.Server(config).run(sockets=[sock])
    except ConfigError as err:
        return fail("serve-model", str(err), EXIT_BAD_INPUT)
    except StorageError as err:
        return fail("serve-model", str(err))
    finally:
        sock.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"serve-model: {args.run_id} stopped", file=sys.stderr)
    return 0
