"""After training: how long `trainstack eval` takes on the tiny model, and what the local
OpenAI-compatible endpoint (`trainstack serve-model`) gives 8 concurrent clients.

The default tiny model (4.6M parameters, byte tokenizer) is trained for 10 steps with
`trainstack launch`, then `trainstack eval` scores it on data/eval's two tasks (8 multiple-
choice documents of 4 choices, 8 generations of at most 8 tokens), directly (the export through
lm-eval's hf model) and through the endpoint (local-completions); each is one process, so its
time includes Python, torch and lm-eval start-up and the export. Then 8 threads each send
BENCH_EVAL_REQUESTS completions (a 35-byte prompt, up to 32 greedy tokens; an answer that
ends at EOS counts the tokens it returned) and the figures are request latency p50/p99 and
generated tokens per second over the whole run. The server answers one request at a time
(its Engine holds a lock), so p50 under 8 clients is about 8 x one request's time.
Targets (a shared 2-core box): both evals finish; the endpoint's scores equal the direct ones;
no failed requests.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
CLIENTS = 8
REQUESTS = int(os.environ.get("BENCH_EVAL_REQUESTS", "6"))
TASKS = ["eval.tasks=[ts_mc,ts_gen]", "eval.include_path=data/eval", "eval.include_defaults=false"]
PROMPT = "Once upon a time there was a little"


def _percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def _trainstack(cwd: Path, env: dict, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=1800,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"trainstack {' '.join(args)}: {done.stderr[-2000:]}")
    return time.perf_counter() - started, done


def _scores(cwd: Path, name: str) -> dict:
    results = json.loads((cwd / f"runs/bench/eval/{name}/results.json").read_text())["results"]
    return {t: {k: v for k, v in m.items() if "," in k and "stderr" not in k}
            for t, m in results.items()}  # fmt: skip


def _load(url: str) -> tuple[list[float], int, int]:
    def client(_: int) -> tuple[list[float], int, int]:
        times, tokens, failed = [], 0, 0
        with httpx.Client(base_url=url, timeout=600) as http:
            for _ in range(REQUESTS):
                started = time.perf_counter()
                answer = http.post("/v1/completions", json={
                    "prompt": PROMPT, "max_tokens": 32, "temperature": 0})  # fmt: skip
                times.append(time.perf_counter() - started)
                if answer.status_code != 200:
                    failed += 1
                    continue
                tokens += answer.json()["usage"]["completion_tokens"]
        return times, tokens, failed

    with ThreadPoolExecutor(CLIENTS) as pool:
        parts = list(pool.map(client, range(CLIENTS)))
    return [t for p in parts for t in p[0]], sum(p[1] for p in parts), sum(p[2] for p in parts)


def run() -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        cwd = Path(tmp)
        (cwd / "data").mkdir()
        subprocess.run(["cp", "-r", str(REPO / "data/eval"), str(cwd / "data/eval")], check=True)
        env = dict(os.environ, HF_HOME=str(cwd / "hf"), HF_DATASETS_OFFLINE="1", TMPDIR=tmp,
                   PYTHONPATH=str(REPO))  # fmt: skip
        sample = REPO / "data/sample/train.jsonl"
        _trainstack(cwd, env, "launch", "run_id=bench", "trainer.max_steps=10",
                    f"data.path={sample}")  # fmt: skip
        direct_s, _ = _trainstack(cwd, env, "eval", "bench", *TASKS)
        server = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "serve-model", "bench", "--port", "0"],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            line = server.stdout.readline() if server.stdout else ""
            match = re.search(r"on (http://\S+)", line)
            if not match:
                raise RuntimeError(f"serve-model did not start: {line!r}")
            url = match.group(1)
            endpoint_s, _ = _trainstack(cwd, env, "eval", "bench", "--endpoint", url, *TASKS)
            started = time.perf_counter()
            latencies, tokens, failed = _load(url)
            wall = time.perf_counter() - started
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        same = _scores(cwd, "step-00000010") == _scores(cwd, "step-00000010-endpoint")
    p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    return {
        "eval_direct_s": round(direct_s, 1),
        "eval_endpoint_s": round(endpoint_s, 1),
        "endpoint": {
            "clients": CLIENTS,
            "requests": len(latencies),
            "p50_s": round(p50 or 0, 3),
            "p99_s": round(p99 or 0, 3),
            "tokens_per_s": round(tokens / wall, 1),
            "failed": failed,
        },
        "checks": {
            "endpoint scores equal direct": {"value": same, "target": True, "ok": same},
            "no failed requests": {"value": failed, "target": 0, "ok": failed == 0},
        },
    }
