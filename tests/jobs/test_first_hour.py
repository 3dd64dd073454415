"""What a new user meets in the first hour, in a venv holding only the `local` extra that
`make run` installs (tests/only_extra) and without AWS credentials: the walkthrough's render
works and says in one line what it left unchecked; a submission says what to install; a
render of your own code leaves its archive beside the manifests with the upload command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.jobs.conftest import REPO
from tests.test_readme_commands import NO_AWS, ONLY_EXTRA, only_extra_env

P5 = [
    "compute=p5.48xlarge",
    "compute.nodes=2",
    "job.image=123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer:v1",
    "storage.root=s3://my-bucket/runs",
]


def trainstack_with(extra: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | NO_AWS
    env |= only_extra_env(extra) | {"PYTHONPATH": f"{ONLY_EXTRA}{os.pathsep}{REPO}"}
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_only_extra_venv_lacks_what_the_local_extra_leaves_out(tmp_path):
    probe = (
        "import torch, hydra, matplotlib\ntry:\n import jsonschema\nexcept ImportError: print('no')"
    )
    env = {**os.environ, "TRAINSTACK_ONLY_EXTRA": "local", "PYTHONPATH": str(ONLY_EXTRA)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert (out.returncode, out.stdout.strip()) == (0, "no"), out.stderr[-2000:]


def test_a_render_works_with_the_local_extra_and_a_submission_says_what_to_install(tmp_path):
    rendered = trainstack_with("local", tmp_path, "launch", "backend=render", "run_id=p5x2", *P5)
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    assert "Traceback" not in rendered.stderr
    assert "render: not checked against Kubernetes' JSON schemas" in rendered.stdout
    assert "pip install -c constraints.txt -e '.[jobs]'" in rendered.stdout
    assert (tmp_path / "runs" / "p5x2" / "manifests.yaml").is_file()

    submitted = trainstack_with("local", tmp_path, "launch", "backend=kubernetes", "run_id=k", *P5)
    assert submitted.returncode == 2 and submitted.stderr.count("\n") == 1, submitted.stderr
    assert "needs the jobs extra: pip install" in submitted.stderr


def test_a_render_of_your_code_without_credentials_leaves_the_archive_and_the_upload_line(
    tmp_path,
):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.py").write_text("print('hi')\n")
    args = ["runner=command", "runner.command=[python,train.py]", "runner.workdir=mine"]
    result = trainstack_with("local", tmp_path, "launch", *args, "backend=render", "run_id=c", *P5)
    assert result.returncode == 0, result.stderr[-3000:]
    archives = list((tmp_path / "runs" / "c" / "code").glob("*.tar.gz"))
    assert len(archives) == 1
    local = archives[0].relative_to(tmp_path)
    upload = f"aws s3 cp {local} s3://my-bucket/runs/c/code/{archives[0].name}"
    assert upload in result.stdout, result.stdout
    assert "sample corpus" not in result.stdout  # runner=command reads no data.* of ours


def test_a_pod_read_tokenizer_for_a_tiny_vocabulary_warns_and_a_sweep_says_it_once(cli):
    from tests.jobs.conftest import CLUSTER, build

    llama3 = ["data.path=s3://bkt/raw/train.jsonl", "data.tokenizer=s3://bkt/tokenizers/llama3"]
    gpu = ["compute=p5.48xlarge", *CLUSTER, *llama3]
    tiny = build([*gpu, "model=tiny"], run_id="tiny-p5")
    (warning,) = [w for w in tiny.plan.warnings if "data.tokenizer=" in w]
    assert "model.vocab_size=512 is smaller than any released tokenizer's" in warning
    assert not build([*gpu, "model=llama3_1b"], run_id="big-p5").plan.warnings

    swept = cli(
        "launch", "-m", "model=tiny,llama3_1b", "trainer.lr=1e-4,3e-4", "backend=render",
        "compute=g5.12xlarge", "job.image=ghcr.io/me/trainer:v1", "storage.root=s3://bkt/runs",
    )  # fmt: skip
    assert swept.code == 0, swept.err[-2000:]
    assert swept.out.count("warning  data.path=") == 1  # the sample corpus on GPUs, said once


def test_each_launch_in_one_process_says_a_sweeps_warning_once(cli):
    """Once per launch, not once per process (the API and a test session launch many)."""
    sweep = (
        "launch", "-m", "trainer.lr=1e-4,3e-4", "backend=render", "compute=g5.12xlarge",
        "job.image=ghcr.io/me/trainer:v1", "storage.root=s3://bkt/runs",
    )  # fmt: skip
    for _ in range(2):
        swept = cli(*sweep)
        assert swept.code == 0, swept.err[-2000:]
        assert swept.out.count("warning  data.path=") == 1
