"""Reading prepared data: start-up, memory and input wait do not grow with the corpus, and S3
latency is hidden by the prefetch.

A synthetic prepared corpus of 2.1e9 uint16 tokens (21 shards of 1e8; the token files are
sparse, written in no time, read like any file) against one of 1e6 tokens: the trainer (one
process, a small model) runs a few steps on each. Figures: time from process start to the
first logged step, peak RSS (VmHWM), and data_wait_s as a share of step time. Then the same
small model reads a prepared corpus from S3 (moto) through the fault proxy, with and without
50 ms added per request: tokens/s of the two. Targets (issue 10): start-up <= 1.25x, peak RSS
<= +200 MB, data wait <= 2% of the step, tokens/s with latency >= 0.95x.
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

import numpy as np

from testing_support.s3_server import FaultProxy, Link, MotoS3, s3_env
from trainer.data.shard_format import MANIFEST, Manifest, Shard, Source

REPO = Path(__file__).resolve().parents[1]
BIG_TOKENS, BIG_SHARDS = 2_100_000_000, 21
SMALL_TOKENS = 1_000_000
DOC_TOKENS = 2_000
STEPS = 30
MODEL = [
    "model.dim=128",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "model.ffn_hidden_dim=256",
    "data.seq_len=256",
    "trainer.micro_batch_size=8",
    "trainer.warmup_steps=2",
    "trainer.log_interval=1",
    "trainer.eval_interval=0",
    "trainer.checkpoint.interval=0",
    "trainer.peak_tflops=0.1",
    f"trainer.max_steps={STEPS}",
]


def write_corpus(root: Path, tokens: int, shards: int, sparse: bool) -> None:
    """`shards` equal token shards of documents of DOC_TOKENS tokens, then the manifest."""
    per_shard = tokens // shards
    rng = np.random.default_rng(0)
    entries = []
    (root / "train").mkdir(parents=True)
    for index in range(shards):
        shard = Shard(
            "train", f"{index:05d}", per_shard, (per_shard + DOC_TOKENS - 1) // DOC_TOKENS
        )
        path = root / shard.file("tokens")
        if sparse:  # a hole reads as zeros: a valid token stream, no 4 GB written
            with path.open("wb") as f:
                f.truncate(per_shard * 2)
        else:
            rng.integers(0, 256, per_shard, dtype="<u2").tofile(path)
        starts = np.arange(0, per_shard, DOC_TOKENS, dtype="<u8")
        starts.tofile(root / shard.file("docs"))
        entries.append(shard)
    manifest = Manifest(
        dtype="uint16",
        vocab_size=257,
        tokenizer_fingerprint="byte-v1",
        data_format="text",
        isolate_documents=False,
        sources=[Source("synthetic://", 0, "0")],
        shards=entries,
    )
    (root / MANIFEST).write_text(manifest.to_json())


def train(data_path: str, work: Path, env: dict[str, str] | None = None) -> dict:
    """One trainer process: seconds to the first step, peak RSS, per-step figures."""
    run_dir = work / f"run-{len(list(work.glob('run-*')))}"
    config = work / "config.yaml"
    config.write_text(f"run_dir: {run_dir}\nseed: 0\n")
    command = [sys.executable, "-m", "trainer", "--config", str(config), *MODEL]
    command.append(f"data.path={data_path}")
    started = time.perf_counter()
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics, first_step, peak_kb = run_dir / "logs/metrics.jsonl", None, 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
        except (OSError, IndexError):
            pass
        if first_step is None and metrics.is_file() and '"loss"' in metrics.read_text():
            first_step = time.perf_counter() - started
        time.sleep(0.02)
    if proc.returncode != 0:
        raise RuntimeError(f"trainer exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r for r in records if "loss" in r][3:]  # past warm-up
    return {
        "startup_to_first_step_s": round(first_step or float("nan"), 2),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "data_wait_share": statistics.mean(r["time/data_wait_s"] / r["time/step_s"] for r in steps),
        "tokens_per_s": statistics.median(r["throughput/tokens_per_s"] for r in steps),
    }


def check(value: float, target: str, ok: bool) -> dict:
    return {"value": round(value, 4), "target": target, "ok": bool(ok)}


def s3_runs(work: Path) -> dict:
    corpus = work / "s3corpus"
    write_corpus(corpus, 20_000_000, 4, sparse=False)
    moto = MotoS3().start()
    try:
        client = moto.client()
        client.create_bucket(Bucket="bench")
        for path in corpus.rglob("*"):
            if path.is_file():
                client.upload_file(str(path), "bench", f"corpus/{path.relative_to(corpus)}")
        figures = {}
        for name, link in (("no_latency", None), ("latency_50ms", Link(0.05, 1000.0))):
            proxy = FaultProxy(moto.url, link=link).start()
            try:
                figures[name] = train("s3://bench/corpus", work, s3_env(proxy.url))
                figures[name]["requests"] = len(proxy.seen)
            finally:
                proxy.stop()
        return figures
    finally:
        moto.stop()


def run() -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-data-read-"))
    try:
        write_corpus(work / "big", BIG_TOKENS, BIG_SHARDS, sparse=True)
        write_corpus(work / "small", SMALL_TOKENS, 1, sparse=False)
        small = train(str(work / "small"), work)
        big = train(str(work / "big"), work)
        s3 = s3_runs(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    startup = big["startup_to_first_step_s"] / small["startup_to_first_step_s"]
    rss = big["peak_rss_mb"] - small["peak_rss_mb"]
    wait = max(big["data_wait_share"], small["data_wait_share"])
    latency = s3["latency_50ms"]["tokens_per_s"] / s3["no_latency"]["tokens_per_s"]
    return {
        "corpus_tokens": {"big": BIG_TOKENS, "small": SMALL_TOKENS},
        "small": small,
        "big": big,
        "s3": s3,
        "checks": {
            "startup_big_over_small": check(startup, "<= 1.25", startup <= 1.25),
            "peak_rss_big_minus_small_mb": check(rss, "<= 200", rss <= 200),
            "data_wait_share_of_step": check(wait, "<= 0.02", wait <= 0.02),
            "s3_tokens_per_s_50ms_over_none": check(latency, ">= 0.95", latency >= 0.95),
        },
    }
