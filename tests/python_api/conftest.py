"""The Python API on the local backend, fast: a small program of the user's (runner=command,
no torchrun) that writes the metrics it is told to and exits with the code it is told to,
from an empty working directory (so "nothing written" can be checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROGRAM = """\
import argparse, json, os, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--loss", type=float, default=1.0)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--exit", type=int, default=0)
args = parser.parse_args()
with open(os.environ["TRAINSTACK_METRICS"], "a") as out:
    for step in range(1, args.steps + 1):
        out.write(json.dumps({"step": step, "loss": args.loss + 1.0 / step}) + "\\n")
print(f"trained {args.steps} steps", flush=True)
time.sleep(args.sleep)
if args.exit:
    print("boom: the program failed", flush=True)
sys.exit(args.exit)
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory holding nothing but the user's project."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def program(tmp_path: Path) -> list[str]:
    """Overrides that make the job the program above (args: `+runner.args.loss=...`)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "prog.py").write_text(PROGRAM)
    return [
        "runner=command",
        "runner.command=[python,-u,prog.py]",
        "runner.torchrun=false",
        f"runner.workdir={project}",
    ]


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))
