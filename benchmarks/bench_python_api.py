"""The Python API (trainstack/).

1. `import trainstack`, in a fresh interpreter (median of five). Target: <= 0.5 s (about
   0.1 s on an idle machine): it loads neither Hydra, torch nor a Kubernetes client, so a
   notebook or a pipeline pays next to nothing for the import.
2. `trainstack.launch(..., dryrun=True)` in-process, the first call of a process and the
   calls after it (median of five: Hydra and the pipeline are loaded, as in a notebook),
   beside `trainstack launch --dryrun` with the same overrides (a process each, median of
   three). Targets: a warm in-process dry run <= 1 s, and faster than the CLI's.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
JOB = ["model.n_layers=2", "trainer.max_steps=2"]
IMPORT_TARGET_S = 0.5
WARM_DRYRUN_TARGET_S = 1.0


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def bench_import() -> float:
    code = "import time; t = time.perf_counter(); import trainstack; print(time.perf_counter() - t)"
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(5):
            out = subprocess.run(
                [sys.executable, "-c", code], cwd=tmp, env=_env(), capture_output=True, text=True
            )
            times.append(float(out.stdout))
    return statistics.median(times)


def bench_dryruns() -> dict:
    code = (
        "import json, time, trainstack\n"
        "times = []\n"
        "for _ in range(6):\n"
        "    t = time.perf_counter()\n"
        f"    trainstack.launch(*{JOB!r}, dryrun=True)\n"
        "    times.append(time.perf_counter() - t)\n"
        "print(json.dumps(times))\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp,
            env=_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        times = [float(x) for x in out.stdout.strip().strip("[]").split(",")]
        cli = [str(BIN / "trainstack")] if (BIN / "trainstack").exists() else []
        argv = [*(cli or [sys.executable, "-m", "jobs.launch"]), *(["launch"] if cli else [])]
        walls = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run(
                [*argv, "--dryrun", *JOB],
                cwd=tmp,
                env=_env(),
                stdout=subprocess.DEVNULL,
                check=True,
            )
            walls.append(time.perf_counter() - started)
    return {
        "first_s": round(times[0], 3),
        "warm_s": round(statistics.median(times[1:]), 3),
        "cli_s": round(statistics.median(walls), 3),
    }


def run() -> dict:
    imported = round(bench_import(), 3)
    dry = bench_dryruns()
    return {
        "import_trainstack_s": imported,
        "launch_dryrun_first_call_s": dry["first_s"],
        "launch_dryrun_warm_s": dry["warm_s"],
        "cli_launch_dryrun_s": dry["cli_s"],
        "checks": {
            "import trainstack (s)": {
                "value": imported,
                "target": f"<= {IMPORT_TARGET_S}",
                "ok": imported <= IMPORT_TARGET_S,
            },
            "in-process launch(dryrun=True), warm (s)": {
                "value": dry["warm_s"],
                "target": f"<= {WARM_DRYRUN_TARGET_S} and < the CLI's {dry['cli_s']}",
                "ok": dry["warm_s"] <= WARM_DRYRUN_TARGET_S and dry["warm_s"] < dry["cli_s"],
            },
        },
    }
