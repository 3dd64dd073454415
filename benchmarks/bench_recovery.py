"""Recovery on the local backend: time from a SIGKILLed rank to training again, against the
checkpoint interval.

One 2-rank CPU run of a small model under `trainer.launch --max-restarts` (what every job
runs); rank 1 is SIGKILLed KILLS times, each once the run has made progress past a checkpoint.
"Training again" is the first step the restarted ranks log. The steps redone are those since
the last committed checkpoint (at most `trainer.checkpoint.interval - 1`). Target: median
recovery <= 60 s here (process start-up with torch imports dominates on a busy 2-core machine).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testing_support.overrides import SMALL_MODEL

KILLS = 5
INTERVAL = 4
STEP_DELAY_S = 0.2
TARGET_MEDIAN_S = 60.0
# The tests' small model (a step takes milliseconds), checkpointing every INTERVAL steps and
# running until killed.
MODEL = [
    *SMALL_MODEL,
    f"trainer.checkpoint.interval={INTERVAL}",
    "trainer.max_steps=100000",
]
REPO = Path(__file__).resolve().parents[1]


def _steps(metrics: Path) -> list[int]:
    try:
        lines = metrics.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line)["step"] for line in lines if '"loss"' in line]


def _rank_pid(run_id: str, rank: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        wanted = {f"TRAINSTACK_RUN_ID={run_id}".encode(), f"RANK={rank}".encode()}
        if wanted <= set(env) and b"TORCHELASTIC_RUN_ID" in b"".join(env):
            return int(entry.name)
    return None


def _wait(condition, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("recovery benchmark: timed out")
        time.sleep(0.05)


def run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        lines = (REPO / "data/sample/train.jsonl").read_text().splitlines(True)[:120]
        corpus.write_text("".join(lines))
        config = work / "config.yaml"
        config.write_text(f"run_dir: {work / 'run'}\nseed: 0\n")
        metrics = work / "run" / "logs" / "metrics.jsonl"
        env = {
            **os.environ,
            "TRAINSTACK_RUN_ID": "bench-recovery",
            "TRAINSTACK_FAULT_STEP_DELAY_S": str(STEP_DELAY_S),
        }
        command = [
            sys.executable, "-m", "trainer.launch", "--standalone", "--nproc_per_node=2",
            f"--max-restarts={KILLS}", "-m", "trainer", "--config", str(config),
            f"data.path={corpus}", *MODEL,
        ]  # fmt: skip
        log = (work / "out.txt").open("w")
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log)
        recoveries, redone = [], []
        try:
            for _ in range(KILLS):
                seen = len(_steps(metrics))
                _wait(lambda seen=seen: len(_steps(metrics)) >= seen + INTERVAL + 1)
                pid = _rank_pid("bench-recovery", 1)
                before = _steps(metrics)
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
                logged = len(before)
                _wait(lambda logged=logged: len(_steps(metrics)) > logged)
                recoveries.append(time.monotonic() - killed_at)
                resumed_at = _steps(metrics)[len(before)]  # first step logged after restart
                redone.append(before[-1] - resumed_at + 1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
            log.close()
    median = statistics.median(recoveries)
    return {
        "kills": KILLS,
        "recovery_seconds": [round(r, 2) for r in recoveries],
        "median_recovery_s": round(median, 2),
        "checkpoint_interval_steps": INTERVAL,
        "step_time_s_at_least": STEP_DELAY_S,
        "checkpoint_interval_s_at_least": INTERVAL * STEP_DELAY_S,
        "steps_redone": redone,
        "checks": {
            "median_recovery_s": {
                "value": round(median, 2),
                "target": f"<= {TARGET_MEDIAN_S}",
                "ok": median <= TARGET_MEDIAN_S,
            },
            "steps_redone_below_interval": {
                "value": max(redone),
                "target": f"< {INTERVAL}",
                "ok": max(redone) < INTERVAL,
            },
        },
    }
