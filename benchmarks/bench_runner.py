"""Runner benchmarks (issue 24).

1. Launch overhead of runner=command over bare torchrun on the same 2-rank DDP script: the
   pod's command (`trainer.runner_exec` -> `trainer.launch` -> the script) against `torchrun
   --standalone` (median of back-to-back pairs; target <= 0.5 s), and, reported, the whole
   `trainstack launch` around it (its own time outside the pod command, from the run's state).
2. `runner.workdir` of a 20 MB tree: pack + store + unpack (with the sha256 check), run dir on
   local disk (target <= 2 s) and on S3 (moto on loopback: reported).
3. runner=hf (transformers.Trainer) against the built-in trainer: tokens/s on the same tiny
   random Llama, data and batch, 2 CPU ranks (reported; the built-in trainer is the fast
   path).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SCRIPT = """
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""
TREE_MB = 20


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PET_")}


def _timed(argv: list[str], cwd: str | Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree: user + system)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def bench_launch_overhead(repeats: int = 5) -> dict:
    """The pod's command of runner=command against bare torchrun on one DDP script,
    interleaved. On shared cores the wall time of a 2-rank start swings by seconds between
    runs, so the overhead is also measured as CPU seconds (what the extra processes cost
    whatever the load) and as `trainer.runner_exec` alone (the only step bare torchrun lacks
    besides trainer.launch, torchrun's own code in-process)."""
    from datetime import UTC, datetime

    from jobs.backends.local.backend import LocalBackend
    from jobs.compose import compose
    from jobs.materialize import materialize

    bare, pod, wrapper, launched, outside = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ddp.py").write_text(SCRIPT)
        overrides = ["runner=command", "runner.command=[python,ddp.py]", f"storage.root={tmp}/runs"]
        for attempt in range(repeats):
            job = materialize(
                compose([*overrides, f"run_id=pod-{attempt}"]),
                now=datetime.now(UTC),
                git_sha=None,
            )
            request = LocalBackend(f"{tmp}/runs", cwd=tmp).dryrun(job).request
            Path(request.state_dir, "job").mkdir(parents=True, exist_ok=True)
            Path(request.state_dir, "job", "config.yaml").write_text(request.config_text)
            bare_argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node=2", "ddp.py"]
            bare.append(_timed(bare_argv, tmp, _env()))
            pod.append(_timed(request.argv, tmp, {**_env(), **request.env}))
            split = request.argv.index("--")
            wrapper.append(_timed([*request.argv[: split + 1], "true"], tmp, _env()))
        for attempt in range(3):  # the whole CLI, reported: Hydra, validation, the supervisor
            run_id = f"cli-{attempt}"
            cli = [str(BIN / "trainstack"), "launch", *overrides, f"run_id={run_id}"]
            launched.append(_timed(cli, tmp, _env())[0])
            state = json.loads(Path(tmp, "runs", run_id, "job", "state.json").read_text())
            assert state["state"] == "succeeded", state
            outside.append(launched[-1] - state["torchrun_seconds"])
    wall_pairs = [p[0] - b[0] for p, b in zip(pod, bare, strict=True)]
    cpu_pairs = [p[1] - b[1] for p, b in zip(pod, bare, strict=True)]
    return {
        "bare_torchrun_wall_s": [round(s[0], 3) for s in bare],
        "pod_command_wall_s": [round(s[0], 3) for s in pod],
        "wall_overhead_pairs_s": [round(s, 3) for s in wall_pairs],
        "wall_overhead_median_s": round(statistics.median(wall_pairs), 3),
        "bare_torchrun_cpu_s": [round(s[1], 3) for s in bare],
        "pod_command_cpu_s": [round(s[1], 3) for s in pod],
        "cpu_overhead_median_s": round(statistics.median(cpu_pairs), 3),
        "runner_exec_alone_wall_s": [round(s[0], 3) for s in wrapper],
        "runner_exec_alone_median_s": round(statistics.median(s[0] for s in wrapper), 3),
        "trainstack_launch_wall_s": [round(s, 3) for s in launched],
        "trainstack_launch_outside_pod_command_s": [round(s, 3) for s in outside],
    }


def _tree(root: Path, megabytes: int) -> None:
    """Half source-like text, half incompressible binary (checkpoints, assets), 100 KB files."""
    import random

    rng = random.Random(0)
    words = [f"token{i}" for i in range(500)]
    for index in range(megabytes * 10):
        path = root / f"pkg{index % 7}" / f"file{index}.{'py' if index % 2 else 'bin'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if index % 2:
            path.write_text(" ".join(rng.choice(words) for _ in range(15_000))[:100_000])
        else:
            path.write_bytes(rng.randbytes(100_000))


def _workdir_round(tree: Path, run_dir: str, into: Path) -> dict:
    from jobs import workdir
    from jobs.runners.program import code_archive
    from trainer.runner_exec import fetch, unpack

    workdir._packed.clear()  # a fresh launch: nothing packed in this process yet
    started = time.perf_counter()
    packed = workdir.pack(str(tree), 100)
    packed_at = time.perf_counter()
    code = code_archive(run_dir, packed.sha256)
    workdir.store(run_dir, code.uri, packed.data)
    stored_at = time.perf_counter()
    shutil.rmtree(into, ignore_errors=True)
    unpack(fetch(code.uri, code.sha256), code.sha256, into)
    done = time.perf_counter()
    return {
        "pack_s": round(packed_at - started, 3),
        "store_s": round(stored_at - packed_at, 3),
        "fetch_unpack_s": round(done - stored_at, 3),
        "total_s": round(done - started, 3),
        "archive_mib": round(len(packed.data) / 2**20, 2),
        "files": packed.files,
    }


def bench_workdir(repeats: int = 3) -> dict:
    from benchmarks.bench_storage import start_moto
    from testing_support.s3_server import s3_env

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        _tree(tree, TREE_MB)
        raw = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
        local = [
            _workdir_round(tree, f"{tmp}/runs/r{i}", Path(tmp) / f"code{i}") for i in range(repeats)
        ]
        moto, url = start_moto()
        saved = dict(os.environ)
        try:
            os.environ.update(s3_env(url))
            import boto3

            boto3.client("s3").create_bucket(Bucket="bench-workdir")
            s3 = [
                _workdir_round(tree, f"s3://bench-workdir/runs/r{i}", Path(tmp) / f"s3code{i}")
                for i in range(repeats)
            ]
        finally:
            os.environ.clear()
            os.environ.update(saved)
            moto.kill()
            moto.wait()
    best = min(local, key=lambda r: r["total_s"])
    return {
        "tree_mib": round(raw / 2**20, 1),
        "local": local,
        "s3_moto": s3,
        "local_best_total_s": best["total_s"],
        "s3_best_total_s": min(r["total_s"] for r in s3),
    }


def _tokens_per_s(run_dir: Path, skip: int = 3) -> float:
    rates = [
        r["throughput/tokens_per_s"]
        for r in map(json.loads, (run_dir / "logs" / "metrics.jsonl").read_text().splitlines())
        if "throughput/tokens_per_s" in r and r.get("step", 0) > skip
    ]
    return round(statistics.median(rates), 1)


def bench_hf_vs_builtin(steps: int = 20) -> dict:
    sys.path.insert(0, str(REPO))
    from testing_support.hf_models import build_llama, word_corpus

    with tempfile.TemporaryDirectory() as tmp:
        source = build_llama(Path(tmp) / "llama", tied=False, hidden_size=128, num_hidden_layers=4)
        corpus = word_corpus(Path(tmp) / "corpus.jsonl", docs=600)
        common = [
            "model=hf",
            f"model.init_from={source}",
            f"data.path={corpus}",
            "data.seq_len=128",
            "trainer.micro_batch_size=4",
            f"trainer.max_steps={steps}",
            "trainer.log_interval=1",
            "trainer.eval_interval=0",
            "trainer.checkpoint.interval=0",
            "trainer.mixed_precision=fp32",
            f"storage.root={tmp}/runs",
        ]
        figures = {}
        for name, extra in (("builtin", ["trainer.peak_tflops=0.1"]), ("hf", ["runner=hf"])):
            cli = [str(BIN / "trainstack"), "launch", *common, *extra, f"run_id={name}"]
            _timed(cli, tmp, _env())
            figures[f"{name}_tokens_per_s"] = _tokens_per_s(Path(tmp) / "runs" / name)
    figures["hf_over_builtin"] = round(
        figures["hf_tokens_per_s"] / figures["builtin_tokens_per_s"], 3
    )
    return figures


def run() -> dict:
    launch = bench_launch_overhead()
    tree = bench_workdir()
    speed = bench_hf_vs_builtin()
    return {
        "launch_overhead": launch,
        "workdir_20mb": tree,
        "hf_vs_builtin_cpu": speed,
        "checks": {
            "runner_command_overhead_over_torchrun_cpu_s": {
                "value": launch["cpu_overhead_median_s"],
                "target": "<= 0.5 (pod command vs bare torchrun, CPU s, median of pairs)",
                "ok": launch["cpu_overhead_median_s"] <= 0.5,
            },
            "runner_exec_alone_s": {
                "value": launch["runner_exec_alone_median_s"],
                "target": "<= 0.5 (wall; the step bare torchrun lacks)",
                "ok": launch["runner_exec_alone_median_s"] <= 0.5,
            },
            "workdir_20mb_pack_store_unpack_local_s": {
                "value": tree["local_best_total_s"],
                "target": "<= 2.0",
                "ok": tree["local_best_total_s"] <= 2.0,
            },
        },
    }
