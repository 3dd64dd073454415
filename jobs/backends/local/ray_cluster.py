"""`python -m jobs.backends.local.ray_cluster --num-cpus N --cwd DIR -- PROGRAM...`: a RayJob
here (backend=local job.api=rayjob), what KubeRay does on a cluster, on one node.

Starts a one-node Ray cluster owned by this process (`ray.init`: GCS, raylet, dashboard with
its Jobs API, on 127.0.0.1 and free ports) with the CPUs the job asks for and no GPUs,
submits PROGRAM through Ray's Jobs SDK (`JobSubmissionClient`, as `ray job submit` does in
KubeRay's submitter pod), streams the job's logs to stdout (the local supervisor appends them
to the run's output.log), and stops the cluster at the end: `ray.shutdown()` stops the
processes this `ray.init` started, by their ids (never `ray stop`, which stops every Ray on the
machine). SIGTERM (`trainstack cancel`) stops the Ray job first.

Ray 2.60 turns on token authentication for a local cluster and would keep the token under
~/.ray: the token is made here and passed in the environment (RAY_AUTH_TOKEN), and HOME is the
cluster's temp dir, so nothing lands in the user's home. Exits with the driver's exit code
(1 when Ray does not know it).

Run by the local supervisor only (jobs/backends/local/backend.py), never imported by the
launcher: `ray` is the `ray` extra's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import shutil
import signal
import socket
import sys
import tempfile

import ray
from ray.job_submission import JobStatus, JobSubmissionClient

TOKEN_ENV = {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
OBJECT_STORE_BYTES = 512 * 1024**2
"""Ray's default is 30% of RAM in /dev/shm; a job here moves small objects."""
STOPPED_EXIT = 143
"""A job stopped by a cancel: the code a pod killed by SIGTERM gives."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: python -m jobs.backends.local.ray_cluster [...] -- PROGRAM")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m jobs.backends.local.ray_cluster")
    parser.add_argument("--num-cpus", type=int, required=True)
    parser.add_argument("--cwd", required=True)
    return parser.parse_args(argv[:split]), argv[split + 1 :]


async def _stream(client: JobSubmissionClient, job_id: str) -> None:
    async for chunk in client.tail_job_logs(job_id):
        sys.stdout.write(chunk)
        sys.stdout.flush()


def _own_environment() -> None:
    """Re-exec with the token, HOME and a temp dir in the environment: Ray reads its auth mode
    once, when `ray` is imported, so they must be there before this module's imports."""
    if os.environ.get("TRAINSTACK_RAY_TEMP"):
        return
    # Short: Ray's socket paths under it must stay below the 107-byte limit of a unix socket.
    temp = tempfile.mkdtemp(prefix="ts-ray-")
    env = {**os.environ, **TOKEN_ENV, "RAY_AUTH_TOKEN": secrets.token_hex(32), "HOME": temp}
    env["TRAINSTACK_RAY_TEMP"] = temp
    os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]], env)


def run(num_cpus: int, cwd: str, program: list[str]) -> int:
    temp = os.environ["TRAINSTACK_RAY_TEMP"]
    port = _free_port()
    print(f"[ray_cluster] starting a one-node Ray cluster: {num_cpus} CPUs, dashboard :{port}")
    sys.stdout.flush()
    try:
        ray.init(
            num_cpus=num_cpus,
            num_gpus=0,
            include_dashboard=True,
            dashboard_host="127.0.0.1",
            dashboard_port=port,
            _temp_dir=temp,
            object_store_memory=OBJECT_STORE_BYTES,
            log_to_driver=False,
        )
        client = JobSubmissionClient(f"http://127.0.0.1:{port}")
        # The driver starts in the run's directory, as the supervisor's processes do.
        entrypoint = f"cd {shlex.quote(cwd)} && {shlex.join(program)}"
        job_id = client.submit_job(entrypoint=entrypoint)
        print(f"[ray_cluster] submitted {job_id}")
        sys.stdout.flush()

        def stop(_signum: int, _frame: object) -> None:
            client.stop_job(job_id)

        signal.signal(signal.SIGTERM, stop)
        asyncio.run(_stream(client, job_id))
        info = client.get_job_info(job_id)
        print(f"[ray_cluster] {job_id}: {info.status} {info.message or ''}".rstrip())
        if info.status == JobStatus.SUCCEEDED:
            return 0
        if info.status == JobStatus.STOPPED:
            return STOPPED_EXIT
        return info.driver_exit_code or 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    _own_environment()
    options, program = _parse(sys.argv[1:])
    sys.exit(run(options.num_cpus, options.cwd, program))
