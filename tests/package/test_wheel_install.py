"""`pip install` of the built wheel (not editable) works from any directory: the config tree,
the Hydra plugins, the API's static files and the sample corpus ship in it, a user's own
config dir adds an experiment, and that experiment trains here and renders for a cluster; the
default job trains there too, from the CLI and from `import trainstack`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_EXPERIMENT = """# @package _global_
# A user's experiment, kept in the user's own config dir.
defaults:
  - override /model: tiny
  - override /data: jsonl
model:
  n_layers: 2
data:
  path: {data}
  tokenizer: byte
  seq_len: 64
trainer:
  micro_batch_size: 2
  max_steps: 2
  eval_interval: 0
  checkpoint:
    interval: 0
"""


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done


def build_wheel(tmp: Path) -> Path:
    """The wheel of the current sources, built from a copy (the checkout stays clean)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    source = tmp / "src"
    for name in listed:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    run([*pip, str(source), "-w", str(wheels)], tmp, dict(os.environ))
    (wheel,) = wheels.glob("trainstack-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_installs_and_runs_a_user_experiment_from_anywhere(tmp_path):
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "conf/config.yaml",
        "conf/model/tiny.yaml",
        "conf/stack/none.yaml",
        "hydra_plugins/trainstack_searchpath/searchpath.py",
        "hydra_plugins/trainstack_launcher/launcher.py",
        "hydra_plugins/trainstack_sweeper/sweeper.py",
        "hydra_plugins/kubernetes_launcher/launcher.py",
        "jobs/api/static/charts.js",
        "jobs/sample/train.jsonl",
        "trainstack/__init__.py",
        "trainstack/py.typed",
    ):
        assert shipped in names, shipped
    # The corpus itself, not the checkout's link to it.
    corpus = zipfile.ZipFile(wheel).getinfo("jobs/sample/train.jsonl")
    assert corpus.file_size == (REPO / "data" / "sample" / "train.jsonl").stat().st_size

    # A fresh venv; its dependencies come from this venv's site-packages through a .pth (no
    # torch reinstall), trainstack itself only from the wheel.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        tmp_path,
        dict(os.environ),
    ).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "PYTHONPATH"))}
    run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp_path,
        env,
    )

    work = tmp_path / "work"
    user_conf = tmp_path / "my-configs"
    (user_conf / "experiment").mkdir(parents=True)
    work.mkdir()
    data = tmp_path / "corpus.jsonl"
    lines = (REPO / "data" / "sample" / "train.jsonl").read_text().splitlines()[:400]
    data.write_text("\n".join(lines) + "\n")
    (user_conf / "experiment" / "mine.yaml").write_text(USER_EXPERIMENT.format(data=data))
    env["TRAINSTACK_CONFIG_PATH"] = str(user_conf)
    trainstack = str(env_dir / "bin" / "trainstack")

    where = run([str(python), "-c", "import jobs; print(jobs.__file__)"], work, env).stdout
    assert where.startswith(str(env_dir)), where  # the installed copy, not the checkout

    run([trainstack, "launch", "experiment=mine", "run_id=mine-local"], work, env)
    state = (work / "runs" / "mine-local" / "job" / "state.json").read_text()
    assert '"succeeded"' in state
    assert (work / "runs" / "mine-local" / "logs" / "metrics.jsonl").is_file()

    render = [
        trainstack,
        "launch",
        "experiment=mine",
        "run_id=mine-render",
        "backend=render",
        "compute=g5.12xlarge",
        "job.image=registry.example.com/trainer:v1",
        "storage.root=s3://bucket/runs",
        "data.path=s3://bucket/corpus.jsonl",
    ]
    run(render, work, env)
    manifests = (work / "runs" / "mine-render" / "manifests.yaml").read_text()
    assert "kind: TrainJob" in manifests and "n_layers: 2" in manifests

    # The default job (no data keys) from a directory without data/sample/: the shipped
    # corpus, from the CLI and from the Python API.
    fast = ["trainer.max_steps=1", "trainer.eval_interval=0", "trainer.checkpoint.interval=0"]
    run([trainstack, "launch", "run_id=default-cli", *fast], work, env)
    api = (
        "import trainstack; "
        f"run = trainstack.launch('run_id=default-py', *{fast!r}, wait=True); "
        "print(run.status().state, trainstack.__file__)"
    )
    state, where = run([str(python), "-c", api], work, env).stdout.split()
    assert state == "succeeded" and where.startswith(str(env_dir)), (state, where)
    for run_id in ("default-cli", "default-py"):
        assert '"succeeded"' in (work / "runs" / run_id / "job" / "state.json").read_text()
