"""Run the benchmarks: `python -m benchmarks [NAME ...]` (`make bench` runs them all).

Each `benchmarks/bench_<name>.py` defines `run() -> dict`: the measured figures plus a
`checks` mapping of target name -> {"value", "target", "ok"}. Results go to
`benchmarks/results/<name>.json`; the exit code is non-zero when any target is missed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results"


def available() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help=f"default: all of {available()}")
    args = parser.parse_args(argv)
    names = args.names or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {available()}")
    RESULTS.mkdir(exist_ok=True)
    failed = []
    for name in names:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        figures = importlib.import_module(f"benchmarks.bench_{name}").run()
        figures["_meta"] = {
            "seconds": round(time.perf_counter() - started, 1),
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        (RESULTS / f"{name}.json").write_text(json.dumps(figures, indent=2) + "\n")
        for check, result in figures.get("checks", {}).items():
            mark = "ok  " if result["ok"] else "MISS"
            print(f"  {mark} {check}: {result['value']} (target {result['target']})")
            if not result["ok"]:
                failed.append(f"{name}:{check}")
    if failed:
        print(f"missed targets: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
