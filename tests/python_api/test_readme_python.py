"""The README's "Python API" block runs as written, as a script, from an empty directory with
only what the `local` extra installs importable (tests/only_extra), as the walkthroughs run:
launch, wait, status, logs, metrics, relaunch, a two-point sweep and a bad override caught as
ConfigError with nothing written (the default job, on the sample corpus the package ships)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_readme_commands import NO_AWS, ONLY_EXTRA, only_extra_env

REPO = Path(__file__).resolve().parents[2]
SECTION = re.compile(r"^## Python API\n(.*?)^## ", re.S | re.M)
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def readme_block() -> str:
    section = SECTION.search((REPO / "README.md").read_text())
    assert section, "README.md has no '## Python API' section"
    block = BLOCK.search(section.group(1))
    assert block, "the Python API section has no python block"
    return block.group(1)


@pytest.mark.slow
def test_the_readme_python_api_block_runs_as_written(tmp_path):
    script = tmp_path / "readme_api.py"
    script.write_text(readme_block())
    work = tmp_path / "work"
    work.mkdir()
    # As a `make run` user has it: only the `local` extra importable, no AWS credentials.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | NO_AWS
    env |= only_extra_env("local")
    env["PYTHONPATH"] = os.pathsep.join([str(ONLY_EXTRA), str(REPO)])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    lines = done.stdout.splitlines()
    assert lines[0].startswith("succeeded 4 "), lines
    assert any(line.startswith("best: sweep-") for line in lines), lines
    assert lines[-1].startswith("trainer.max_stepz -> trainer.max_stepz: unknown key"), lines
    assert sorted(p.name for p in (work / "runs").iterdir() if p.name.startswith("py1")) == ["py1"]
