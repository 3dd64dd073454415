"""The trainer's GPU check: `python3 -m benchmarks.gpu.check --out "$OUT"` on a machine with
one H100 or H200 (benchmarks/gpu/README.md), or `--smoke` for its CPU form at tiny sizes.

Runs each case of `benchmarks.gpu.plan.CASES` in a process of its own (`benchmarks.gpu.cases`)
with a timeout cut to what is left of the total budget; a case that fails, hangs or crashes is
recorded with its traceback and the next one runs. A case that ran but found the trainer wrong
(its result's `problems`) is failed too, with its figures kept. Writes `<out>/gpu_check.json`
and each case's log tail under `<out>/logs/`, prints a table, exits 0 when every case that ran
passed.

Stdlib only here, so that the JSON and the table come out whatever the machine lacks. The GPU
machine has torch, transformers, peft, accelerate, safetensors and tokenizers, and no network:
the trainer's one other import, omegaconf (with antlr4, its parser), comes from the pure-Python
wheels in benchmarks/gpu/wheels, put on PYTHONPATH for every process started here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpu.plan import CASES, TRAIN_ROWS, Case
from benchmarks.gpu.procs import kill_tree

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WHEELS = sorted((HERE / "wheels").glob("*.whl"))
NOT_ON_DEVICE = (
    # The trainer's dependencies (pyproject) the GPU machine lacks, and the optional ones;
    # omegaconf and antlr4 come from the wheels.
    "omegaconf",
    "antlr4",
    "rich",
    "boto3",
    "botocore",
    "s3transfer",
    "s3torchconnector",
    "s3torchconnectorclient",
    "zstandard",
    "hydra",
    "tensorboard",
    "wandb",
    "mlflow",
    "matplotlib",
)
DEFAULT_BUDGET_S = {"gpu": 570, "smoke": 500}
"""The GPU machine's command limit is 600 s (its start and the copy back are not counted)."""
MIN_CASE_S = 20
LOG_TAIL = 20_000
LAUNCH_TAIL = 6_000


def child_env(emulate_device: bool) -> dict[str, str]:
    paths = [str(REPO), *map(str, WHEELS)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if emulate_device:
        paths.insert(0, str(HERE / "device_packages"))
        env["TRAINSTACK_GPU_CHECK_DENY"] = ",".join(NOT_ON_DEVICE)
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_case(
    case: Case, mode: str, work: Path, env: dict[str, str], timeout: float, logs: Path
) -> dict:
    result = work / "results" / f"{case.name.replace('/', '-')}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    log = logs / f"{case.name.replace('/', '-')}.txt"
    command = [sys.executable, "-m", "benchmarks.gpu.cases", case.name, "--work", str(work)]
    command += ["--mode", mode, "--result", str(result)]
    started, since = time.perf_counter(), time.time()
    with log.open("w+") as out:
        proc = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=timeout)
            status = "ok" if proc.returncode == 0 and result.is_file() else "failed"
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            status = "timeout"
        except BaseException:  # SIGTERM (see `main`) or ^C: leave nothing running
            kill_tree(proc)
            raise
        out.seek(0)
        text = out.read()
    if len(text) > LOG_TAIL:
        log.write_text(text[-LOG_TAIL:])
    record: dict = {
        "status": status,
        "seconds": round(time.perf_counter() - started, 1),
        "timeout_s": round(timeout),
    }
    if status == "ok":
        record["result"] = json.loads(result.read_text())
        problems = record["result"].get("problems") or []
        if problems:  # it ran, and found the trainer wrong
            record["status"] = "failed"
            record["error"] = "; ".join(problems)
    else:
        record["exit_code"] = proc.returncode
        # the case's own output last: a failure's traceback ends it, the table shows that line
        # (a failed launch's output is in the traceback already; a hung one's is not)
        hung = _last_launch(work, since) if status == "timeout" else ""
        ended = f"\ntimed out after {timeout:.0f}s" if status == "timeout" else ""
        error = f"{hung}{text[-8000:]}{ended}".strip()
        record["error"] = error or f"no output (exit {proc.returncode})"
    return record


def keep_launch_logs(work: Path, into: Path) -> None:
    """Every trainer launch's output tails (its notes, warnings, metrics lines) next to the
    JSON: the work directory goes, and a GPU run is rarely repeated."""
    for folder in sorted((work / "logs").glob("*/")):
        into.mkdir(parents=True, exist_ok=True)
        parts = []
        for name in ("stdout.txt", "stderr.txt"):
            path = folder / name
            text = path.read_text(errors="replace") if path.is_file() else ""
            parts.append(f"--- {name} (last {LAUNCH_TAIL} characters) ---\n{text[-LAUNCH_TAIL:]}")
        (into / f"{folder.name}.txt").write_text("\n".join(parts))


def _last_launch(work: Path, since: float) -> str:
    """The output tails of the trainer this case launched last (a case that timed out was
    waiting on it: what it printed shows where it stuck)."""
    launches = [p for p in (work / "logs").glob("*/stdout.txt") if p.stat().st_mtime >= since]
    launches.sort(key=lambda p: p.stat().st_mtime)
    if not launches:
        return ""
    folder = launches[-1].parent
    tails = []
    for name in ("stdout.txt", "stderr.txt"):
        text = (folder / name).read_text(errors="replace") if (folder / name).is_file() else ""
        tails.append(f"--- {folder.name}/{name} (tail) ---\n{text[-3000:]}")
    return "\n".join(tails) + "\n"


def comparisons(cases: dict[str, dict]) -> dict:
    """Ratios between cases that both ran: LoRA and compile and AC against the plain row."""

    def figures(name: str) -> dict | None:
        entry = cases.get(name, {})
        return entry.get("result") if entry.get("status") == "ok" else None

    def peak(f: dict) -> float | None:
        memory = f["peak_memory_gib"]
        return memory.get("max_allocated_gib", memory.get("max_rss_gib"))

    plain_name = next(iter(TRAIN_ROWS))
    plain = figures(plain_name)
    out: dict = {}
    if plain is None:
        return out
    for name in [*TRAIN_ROWS, "lora"]:
        other = figures(name)
        if name == plain_name or other is None:
            continue
        speed = other["tokens_per_s"] / plain["tokens_per_s"]
        memory = (peak(other) or 0) / (peak(plain) or 1)
        out[f"{name} vs {plain_name}"] = {
            "tokens_per_s_ratio": round(speed, 3),
            "peak_memory_ratio": round(memory, 3),
        }
    return out


def commit() -> str | None:
    if os.environ.get("TRAINSTACK_COMMIT"):
        return os.environ["TRAINSTACK_COMMIT"]
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found.stdout.strip() or None if found.returncode == 0 else None


def table(report: dict) -> str:
    env = report["cases"].get("environment", {}).get("result", {})
    lines = [
        f"trainstack GPU check ({report['mode']}): {env.get('device', '?')}, "
        f"torch {env.get('torch', '?')}, commit {report['commit'] or '?'}, "
        f"{report['wall_s']}s of {report['budget_s']}s",
        f"{'case':34} {'status':8} {'s':>6}  result",
    ]
    for name, entry in report["cases"].items():
        summary = entry.get("result", {}).get("summary") or entry.get("reason") or ""
        if entry["status"] in ("failed", "timeout"):
            summary = _last_line(entry.get("error", ""))
        lines.append(f"{name:34} {entry['status']:8} {entry.get('seconds', 0):>6}  {summary}")
    for name, ratios in report["comparisons"].items():
        lines.append(
            f"  {name}: tokens/s x{ratios['tokens_per_s_ratio']}, "
            f"peak memory x{ratios['peak_memory_ratio']}"
        )
    return "\n".join(lines)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:120] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.gpu.check")
    parser.add_argument(
        "--out",
        type=Path,
        default=os.environ.get("OUT") or REPO / "benchmarks/results/gpu",
        help="where gpu_check.json and logs/ go (default: $OUT, else benchmarks/results/gpu)",
    )
    parser.add_argument("--smoke", action="store_true", help="the CPU form: tiny sizes")
    parser.add_argument(
        "--device-packages",
        action="store_true",
        help="hide the packages the GPU machine lacks (as the test suite runs the CPU form)",
    )
    parser.add_argument("--budget-s", type=float, help="total wall-clock budget (seconds)")
    parser.add_argument("--only", action="append", help="run only this case (repeatable)")
    parser.add_argument("--keep-work", action="store_true", help="keep the work directory")
    options = parser.parse_args(argv)
    mode = "smoke" if options.smoke else "gpu"
    budget = options.budget_s or DEFAULT_BUDGET_S[mode]
    unknown = sorted(set(options.only or ()) - {c.name for c in CASES})
    if unknown:
        parser.error(f"--only: unknown case(s) {unknown}; allowed: {[c.name for c in CASES]}")
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _stop)  # the running case's processes are ended too
    out = options.out
    logs = out / "logs"
    shutil.rmtree(logs, ignore_errors=True)  # ours: a previous run's would mix in
    logs.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="trainstack-gpu-check-"))
    env = child_env(options.device_packages)
    report: dict = {
        "mode": mode,
        "commit": commit(),
        "budget_s": budget,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "work": str(work),
        "cases": {},
    }
    try:
        for case in CASES:
            chosen = options.only is None or case.name in options.only or case.name == "environment"
            left = budget - (time.monotonic() - started)
            timeout = min(case.smoke_timeout_s if options.smoke else case.gpu_timeout_s, left)
            if not chosen:
                continue
            if options.smoke and case.gpu_only:
                report["cases"][case.name] = {"status": "skipped", "reason": case.gpu_only}
            elif timeout < MIN_CASE_S:
                reason = f"budget: {left:.0f}s of {budget:.0f}s left"
                report["cases"][case.name] = {"status": "skipped", "reason": reason}
            else:
                print(f"-- {case.name} (up to {timeout:.0f}s)", flush=True)
                entry = run_case(case, mode, work, env, timeout, logs)
                report["cases"][case.name] = entry
                print(f"   {entry['status']} in {entry['seconds']}s", flush=True)
            if case.name == "environment" and not _usable(report, mode):
                break
            save(report, out, started)  # a machine taken back mid-run still returns these
    finally:
        keep_launch_logs(work, logs / "runs")
        if not options.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    save(report, out, started)
    print(table(report))
    bad = [n for n, e in report["cases"].items() if e["status"] in ("failed", "timeout")]
    budget_skips = [
        n for n, e in report["cases"].items() if e.get("reason", "").startswith("budget")
    ]
    return 1 if bad or budget_skips else 0


def save(report: dict, out: Path, started: float) -> None:
    report["wall_s"] = round(time.monotonic() - started, 1)
    report["comparisons"] = comparisons(report["cases"])
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out / "gpu_check.json")


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _usable(report: dict, mode: str) -> bool:
    """False when the environment case failed, or the GPU form found no GPU (the others would
    train a 1B model on the CPU): the table then says why."""
    entry = report["cases"]["environment"]
    if entry["status"] != "ok":
        return False
    if mode == "gpu" and not entry["result"]["cuda_available"]:
        entry["status"] = "failed"
        entry["error"] = "no CUDA device: the GPU form needs one (--smoke is the CPU form)"
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
