"""Jobs benchmarks.

1. Rendering a 1,000-point sweep (`trainstack launch -m ... backend=render`: compose, validate,
   materialize, check and write every point, plus the summary) against composing the same
   1,000 configs with Hydra alone. Target: <= 1.25x.
2. `trainstack launch` on the local backend against bare torchrun on the same trainer config
   (a few steps). Target: <= 2 s added, as the launcher's own time around torchrun (median of
   three) and as the median wall-time difference of three back-to-back pairs.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SWEEP = [
    "trainer.lr=1e-4,2e-4,3e-4,4e-4,5e-4,6e-4,7e-4,8e-4,9e-4,1e-3",
    "trainer.max_steps=100,200,300,400,500,600,700,800,900,1000",
    "compute.nodes=1,2,3,4,5,6,7,8,9,10",
    "compute=p5.48xlarge",
    "backend=render",
    "job.image=123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
    "storage.root=s3://trainstack-runs/runs",
]
LOCAL_JOB = [
    f"data.path={REPO / 'data' / 'sample' / 'train.jsonl'}",
    "data.seq_len=64",
    "model.n_layers=2",
    "trainer.micro_batch_size=2",
    "trainer.max_steps=2",
    "trainer.eval_interval=0",
    "trainer.checkpoint.interval=0",
]


def bench_sweep_render() -> dict:
    from jobs.compose import compose, composer
    from jobs.sweep import expand

    points = expand(SWEEP)
    assert len(points) == 1000
    with composer():
        started = time.perf_counter()
        for point in points:
            compose(point)
        compose_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        # Hydra's sweeper + the render launcher, as a process: `trainstack launch` execs itself
        # as the Hydra app (its start, ~0.5 s, is in the figure).
        argv = [str(BIN / "trainstack"), "launch", "-m", *SWEEP]
        started = time.perf_counter()
        code = subprocess.run(argv, cwd=tmp, stdout=subprocess.DEVNULL).returncode
        render_s = time.perf_counter() - started
        written = len(list(Path(tmp).glob("runs/*/manifests.yaml")))
    assert code == 0 and written == 1000, (code, written)
    return {"points": 1000, "compose_s": round(compose_s, 2), "render_s": round(render_s, 2)}


def bench_dryrun_start(repeats: int = 5) -> dict:
    """`trainstack launch --dryrun backend=render ...` as a fresh process, end to end: wall
    seconds, and the CPU seconds it used (user + system; on shared cores the wall time also
    holds the time other processes had the CPU)."""
    import resource

    argv = [str(BIN / "trainstack"), "launch", "--dryrun", "backend=render"]
    argv += ["compute=p5.48xlarge", *SWEEP[-2:]]
    seconds, cpu = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds.append(timed(argv, tmp, dict(os.environ)))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {
        "seconds": [round(s, 3) for s in seconds],
        "cpu_seconds": [round(s, 3) for s in cpu],
        "median_s": statistics.median(seconds),
        "median_cpu_s": round(statistics.median(cpu), 3),
    }


def timed(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def bench_local_launch(repeats: int = 3) -> dict:
    """Bare torchrun and `trainstack launch` on the same trainer config, interleaved. The
    launcher's own cost is also measured within each launched run: its wall time minus the
    torchrun duration the supervisor records, which the machine's load swings don't blur."""
    from datetime import UTC, datetime

    from jobs.backends.kubernetes.manifests import trainer_config_yaml
    from jobs.compose import compose
    from jobs.materialize import materialize

    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    bare, launched, overhead = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(repeats):
            run_id = f"bench-{attempt}"
            job = materialize(
                compose([*LOCAL_JOB, f"storage.root={tmp}/bare"]),
                now=datetime.now(UTC),
                git_sha=None,
                run_id=run_id,
            )
            config = Path(tmp) / f"{run_id}.yaml"
            config.write_text(trainer_config_yaml(job.spec))
            bare_argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node=2"]
            bare_argv += ["-m", "trainer", "--config", str(config)]
            bare.append(timed(bare_argv, tmp, env))
            launch = [str(BIN / "trainstack"), "launch", *LOCAL_JOB, f"run_id={run_id}"]
            launched.append(timed(launch, tmp, env))
            state = json.loads((Path(tmp) / "runs" / run_id / "job" / "state.json").read_text())
            assert state["state"] == "succeeded", state
            overhead.append(launched[-1] - state["torchrun_seconds"])
    return {
        "bare_torchrun_s": [round(s, 2) for s in bare],
        "trainstack_launch_s": [round(s, 2) for s in launched],
        "launcher_overhead_s": [round(s, 2) for s in overhead],
    }


def run() -> dict:
    start = bench_dryrun_start()
    sweep = bench_sweep_render()
    local = bench_local_launch()
    ratio = sweep["render_s"] / sweep["compose_s"]
    added = statistics.median(local["launcher_overhead_s"])
    wall_added = statistics.median(
        launched - bare
        for launched, bare in zip(
            local["trainstack_launch_s"], local["bare_torchrun_s"], strict=True
        )
    )
    return {
        "sweep_render": sweep,
        "local_launch": local,
        "dryrun_render_start": start,
        "checks": {
            "dryrun_render_start_s": {
                "value": round(start["median_s"], 3),
                "target": "<= 0.5",
                "ok": start["median_s"] <= 0.5,
            },
            "render_1000_vs_compose_ratio": {
                "value": round(ratio, 3),
                "target": "<= 1.25",
                "ok": ratio <= 1.25,
            },
            "local_launch_added_s": {
                "value": round(added, 2),
                "target": "<= 2.0",
                "ok": added <= 2.0,
            },
            "local_launch_wall_vs_bare_s": {
                "value": round(wall_added, 2),
                "target": "<= 2.0 (median of back-to-back pairs; shared CPUs add seconds)",
                "ok": wall_added <= 2.0,
            },
        },
    }
