"""README "Ray jobs": its local example runs for real, as written (backend=local
job.api=rayjob: a one-node Ray cluster, Ray's Jobs SDK, Ray Train's TorchTrainer with 2 CPU
workers), and leaves no Ray process, temp dir or token behind, nothing in HOME."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from jobs.backends.base import SUCCEEDED

REPO = Path(__file__).resolve().parents[2]
SECTION = re.compile(r"^## Ray jobs\n(.*?)^## ", re.S | re.M)
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def readme_example() -> list[str]:
    section = SECTION.search((REPO / "README.md").read_text()).group(1)
    line = next(
        cmd
        for block in BLOCK.findall(section)
        for cmd in block.splitlines()
        if "backend=render" not in cmd and cmd.startswith("trainstack launch job.api=rayjob")
    )
    return shlex.split(line)[2:]


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


@pytest.mark.slow
def test_the_readme_ray_example_trains_with_two_ray_workers_and_cleans_up(tmp_path):
    work = tmp_path / "work"
    shutil.copytree(REPO / "examples", work / "examples")
    home = tmp_path / "home"
    home.mkdir()
    # Short: Ray's temp dir (its unix sockets) is made under TMPDIR.
    temp = Path(tempfile.mkdtemp(prefix="tsr", dir="/tmp"))
    env = {
        **os.environ,
        "HOME": str(home),
        "TMPDIR": str(temp),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PYTHONPATH": str(REPO),
    }
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "launch", *readme_example(), "run_id=ray-readme"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        run = work / "runs" / "ray-readme"
        log = (run / "job" / "output.log").read_text()
        assert "[ray_cluster] starting a one-node Ray cluster: 2 CPUs" in log
        assert "world_rank=1" in log  # two Ray Train workers
        assert "ray-train: finished" in log
        assert "SUCCEEDED" in log
        state = json.loads((run / "job" / "state.json").read_text())
        assert state["state"] == SUCCEEDED, state
        assert any((run / "checkpoints").rglob("state.pt"))
        assert list(home.iterdir()) == []  # no ~/.ray token, no ~/ray_results
        assert list(temp.glob("ts-ray-*")) == []  # Ray's temp dir (sessions, sockets) removed
        assert _processes_mentioning(str(temp)) == []  # its raylet, GCS, workers stopped
    finally:
        shutil.rmtree(temp, ignore_errors=True)
