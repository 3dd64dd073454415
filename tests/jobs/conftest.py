"""Helpers for the jobs tests: compose + materialize with fixed names and clocks, and the CLI
run in-process inside an empty working directory (so "nothing written" can be checked)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs.compose import compose
from jobs.materialize import MaterializedJob, materialize

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
GIT_SHA = "0123456789abcdef0123456789abcdef01234567"
REPO = Path(__file__).resolve().parents[2]
SAMPLE_DATA = str(REPO / "data" / "sample" / "train.jsonl")
# What a cluster job needs besides compute: an image and shared storage.
CLUSTER = [
    "backend=render",
    "job.image=123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
    "storage.root=s3://trainstack-runs/runs",
]
# What an experiment that refuses the bundled sample (`???`) is given.
OWN_DATA = [
    "data.path=s3://trainstack-data/corpus/train.jsonl",
    "data.tokenizer=s3://trainstack-data/tokenizers/llama3",
]


def build(
    overrides: list[str], run_id: str = "golden-run", sweep_id: str | None = None
) -> MaterializedJob:
    return materialize(
        compose(overrides), now=NOW, git_sha=GIT_SHA, run_id=run_id, sweep_id=sweep_id
    )


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def cli(workdir: Path, capsys: pytest.CaptureFixture[str], exec_in_process):
    """`trainstack ARGS...` in-process; returns exit code and captured output."""
    from jobs.cli import main

    def run(*args: str) -> CliResult:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors; the end of a launch (exec_in_process)
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def trainjob_pod(job: dict, runtime: dict | None = None) -> dict:
    """The node pod Trainer makes of TrainJob `job` on `runtime` (default: the GPU runtime of
    its instance type's group): the runtime's template, then the job's trainer fields and its
    patch (lists appended, maps merged, the rest replaced), as a PyTorchJob's pod compares."""
    import copy

    from catalog import INSTANCE_TYPES
    from jobs.backends.kubernetes.manifest_checks import trainjob_pod_template
    from jobs.backends.kubernetes.pod_facts import default_group_name
    from jobs.backends.kubernetes.runtimes import gpu_runtime
    from jobs.backends.kubernetes.trainjob import INSTANCE_TYPE_ANNOTATION

    if runtime is None:
        name = job["metadata"]["annotations"][INSTANCE_TYPE_ANNOTATION]
        runtime = gpu_runtime(default_group_name(name), INSTANCE_TYPES[name])
    pod = copy.deepcopy(runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"])
    pod = pod["spec"]["template"]["spec"]
    own = copy.deepcopy(trainjob_pod_template(job)["spec"])
    (container,) = pod["containers"]
    (job_container,) = own.pop("containers")
    container["env"] = container.get("env", []) + job_container.pop("env")
    container["volumeMounts"] += job_container.pop("volumeMounts")
    container.update(job_container)
    for key, value in own.items():
        if isinstance(value, list):
            pod[key] = pod.get(key, []) + value
        elif isinstance(value, dict):
            pod[key] = {**pod.get(key, {}), **value}
        else:
            pod[key] = value
    return pod
