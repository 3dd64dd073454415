"""The runner group without running anything long: bad input (one line, exit 2, nothing
written), reproducible workdir archives, the rendered PyTorchJob of runner=command (same
command, the workdir fetch from S3, EFA resources and env), and runner_exec's checksum."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from contract.config import EXIT_BAD_INPUT
from jobs.runners.program import CODE_DIR, SCRATCH_DIR, start_counter
from tests.jobs.conftest import CLUSTER, build, files_under

SCRIPT = ["runner=command", "runner.command=[python,-u,train.py]"]
P5 = ["compute=p5.48xlarge", "compute.nodes=2"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_text("print('train')\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0" * 10)
    return root


def refused(cli, workdir: Path, *overrides: str) -> str:
    result = cli("launch", *overrides)
    assert result.code == EXIT_BAD_INPUT, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert files_under(workdir) == [p for p in files_under(workdir) if not p.startswith("runs")]
    assert not (workdir / "runs").exists()
    return lines[0]


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (["runner=command"], "runner.command", "is not set"),
        (["runner=command", "runner.command=[]"], "runner.command", "is empty"),
        (  # read by torchrun as its own option, not as the program
            ["runner=command", "runner.command=['--rdzv-endpoint=evil:29400',python,x.py]"],
            "runner.command",
            "starts with an option",
        ),
        ([*SCRIPT, "runner.workdir=/no/such/dir"], "runner.workdir", "no such directory"),
        ([*SCRIPT, "runner.workdir=''"], "runner.workdir", "is empty"),
        (["runner=hf"], "model.init_from", "runner=hf"),
        (["runner.command=[python,x.py]"], "runner.command", "not a key of runner=trainstack"),
        ([*SCRIPT, "runner.peft.r=8"], "runner.peft", "not a key of runner=command"),
        (
            ["runner=hf", "model=hf", "model.init_from=/x", "runner.torchrun=false"],
            "runner.torchrun",
            "not a key of runner=hf",
        ),
        ([*SCRIPT, "+runner.args.lr=[1,2]"], "runner.args.lr", "not a single value"),
        ([*SCRIPT, "+runner.args._x=1"], "runner.args._x", "not a flag name"),
        (
            [*SCRIPT, "+runner.env.TRAINSTACK_RUN_ID=x"],
            "runner.env.TRAINSTACK_RUN_ID",
            "job contract",
        ),
        ([*SCRIPT, "runner.torchrun=maybe"], "runner.torchrun", ""),
        ([*SCRIPT, "runner.code=abc"], "runner.code", "set by the launcher"),
        ([*SCRIPT, "runner.name=spark"], "runner.name", "allowed: trainstack, command, hf"),
        (
            [
                *SCRIPT,
                *P5,
                *CLUSTER,
                "cluster.approved_images=[123456789012.dkr.ecr.us-east-1.amazonaws.com/ours]",
            ],
            "job.image",
            "not from an approved registry",
        ),
    ],
)
def test_bad_runner_input_is_one_line_exit_2_nothing_written(cli, workdir, overrides, key, says):
    line = refused(cli, workdir, *overrides)
    assert f"{key}:" in line and says in line, line


def test_an_empty_workdir_is_refused(cli, workdir, tmp_path):
    empty = tmp_path / "empty"
    (empty / "__pycache__").mkdir(parents=True)
    line = refused(cli, workdir, *SCRIPT, f"runner.workdir={empty}")
    assert "runner.workdir:" in line and "no files" in line


def test_a_workdir_over_the_cap_is_refused_naming_the_biggest_files(cli, workdir, project):
    import os

    (project / "weights.bin").write_bytes(os.urandom(3 * 2**20))  # incompressible
    line = refused(cli, workdir, *SCRIPT, f"runner.workdir={project}", "runner.workdir_max_mb=1")
    assert "runner.workdir:" in line and "weights.bin (3.0 MiB)" in line, line


def test_a_workdir_with_a_local_run_dir_on_a_cluster_is_refused(cli, workdir, project):
    overrides = [*SCRIPT, *P5, *CLUSTER, "storage.root=/tmp/runs", f"runner.workdir={project}"]
    line = refused(cli, workdir, *overrides)
    assert line.startswith("trainstack launch: storage.root:") and "s3://" in line


def test_packing_is_reproducible_and_leaves_out_ignored_files(project):
    from jobs.workdir import archive, list_files

    names, source = list_files(project)
    assert (names, source) == (["pkg/model.py", "train.py"], "directory")
    first = archive(project, names)
    (project / "train.py").touch()  # a new mtime changes nothing
    assert hashlib.sha256(archive(project, names)).digest() == hashlib.sha256(first).digest()
    (project / ".trainstackignore").write_text("pkg/\n")
    assert list_files(project)[0] == [".trainstackignore", "train.py"]


def test_a_git_checkout_ships_its_tracked_files_only(project):
    from jobs.workdir import list_files

    git = ["git", "-C", str(project), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "train.py"], check=True)
    assert list_files(project) == (["train.py"], "git")


def test_render_runs_the_same_command_with_the_workdir_fetch_efa_and_env(
    project, s3_direct, s3_bucket, tmp_path
):
    from jobs.backends.render.backend import RenderBackend

    overrides = [
        *SCRIPT,
        *P5,
        *CLUSTER,
        f"storage.root=s3://{s3_bucket}/runs",
        f"runner.workdir={project}",
        "+runner.args.lr=0.001",
        "+runner.env.MY_FLAG=1",
        "job.api=pytorchjob",  # the TrainJob of the same: test_trainjob.py, the goldens
    ]
    job = build(overrides, run_id="cmd-render")
    sha = job.cfg.runner.code
    uri = f"s3://{s3_bucket}/runs/cmd-render/code/{sha}.tar.gz"
    pytorch_job = job.manifests[1]
    pod = pytorch_job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    counter = list(start_counter(job.cfg.job.max_restarts))  # a PyTorchJob pod's first step
    assert container["command"][: len(counter)] == counter
    command = container["command"][len(counter) :]
    assert command[:5] == [
        "python",
        "-m",
        "trainer.runner_exec",
        "--config",
        "/etc/trainstack/config.yaml",
    ]
    assert command[5:11] == ["--code", uri, "--sha256", sha, "--into", CODE_DIR]
    assert command[-5:] == ["--no-python", "python", "-u", "train.py", "--lr=0.001"]
    assert "trainer.launch" in command
    assert container["image"] == CLUSTER[1].split("=", 1)[1]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["MY_FLAG"] == "1"
    assert env["TRAINSTACK_CHECKPOINT_DIR"] == f"{SCRATCH_DIR}/checkpoints"  # synced with:
    assert env["TRAINSTACK_CHECKPOINT_URI"] == f"s3://{s3_bucket}/runs/cmd-render/checkpoints"
    assert env["TRAINSTACK_METRICS"] == f"{SCRATCH_DIR}/logs/metrics.jsonl"
    limits = container["resources"]["limits"]
    assert limits["vpc.amazonaws.com/efa"] == "32" and limits["nvidia.com/gpu"] == "8"
    assert {"mountPath": SCRATCH_DIR, "name": "runner"} in container["volumeMounts"]
    config = yaml.safe_load(job.manifests[0]["data"]["config.yaml"])
    assert config["runner"]["code"] == sha and set(config) == {"run_dir", "seed", "runner"}

    backend = RenderBackend(str(tmp_path / "out"))
    backend.schedule(backend.dryrun(job))
    stored = s3_direct.client().get_object(
        Bucket=s3_bucket, Key=f"runs/cmd-render/code/{sha}.tar.gz"
    )
    assert hashlib.sha256(stored["Body"].read()).hexdigest() == sha


def test_torchrun_false_runs_the_command_once_as_is(project):
    job = build(
        [
            "runner=command",
            "runner.command=[accelerate,launch,train.py]",
            "runner.torchrun=false",
            *P5,
            *CLUSTER,
        ],
        run_id="accel",
    )
    assert job.spec.command[-3:] == ("accelerate", "launch", "train.py")
    assert "trainer.launch" not in job.spec.command
    assert "runner   command once per node: accelerate launch train.py" in str(job.plan)


def _tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _runner_exec(tmp_path: Path, archive: Path, sha: str) -> subprocess.CompletedProcess:
    config = tmp_path / "config.yaml"
    config.write_text(f"run_dir: {tmp_path / 'run'}\nseed: 0\n")
    argv = [sys.executable, "-m", "trainer.runner_exec", "--config", str(config)]
    argv += ["--code", str(archive), "--sha256", sha, "--into", str(tmp_path / "code")]
    argv += ["--", sys.executable, "-c", "import os, mod; print(mod.X, os.getcwd())"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_runner_exec_unpacks_a_verified_archive_and_refuses_a_changed_one(tmp_path):
    data = _tarball({"mod.py": b"X = 41\n"})
    archive = tmp_path / "code.tar.gz"
    archive.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    ok = _runner_exec(tmp_path, archive, sha)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["41", str(tmp_path / "code")]
    assert (tmp_path / "run" / "config.yaml").is_file()  # the run record

    archive.write_bytes(_tarball({"mod.py": b"X = 666\n"}))  # replaced after launch
    bad = _runner_exec(tmp_path, archive, sha)
    assert bad.returncode == EXIT_BAD_INPUT
    assert bad.stdout == "" and f"not {sha} as launched" in bad.stderr
    archive.unlink()
    gone = _runner_exec(tmp_path, archive, sha)
    assert gone.returncode == EXIT_BAD_INPUT and "is missing" in gone.stderr


def test_the_api_request_takes_a_runner_command_and_args_as_data():
    from pydantic import ValidationError

    from jobs.api.models import RunRequest, to_overrides
    from jobs.compose import compose

    request = RunRequest(
        runner="command",
        command=["python", "-u", "train.py", "it's; rm -rf /"],
        args={"lr": 0.001, "name": "a,b"},
    )
    overrides = to_overrides(request)
    cfg = compose(overrides)
    assert list(cfg.runner.command) == ["python", "-u", "train.py", "it's; rm -rf /"]
    assert dict(cfg.runner.args) == {"lr": 0.001, "name": "a,b"}
    with pytest.raises(ValidationError):
        RunRequest(runner="command", args={"x=1 +job.image": 1})  # never part of a key
    with pytest.raises(ValidationError):
        RunRequest(runner="spark")


def test_the_api_policy_admits_runner_keys_but_never_a_workdir_on_the_service():
    from jobs.api.models import RunRequest, to_overrides
    from jobs.api.request_policy import Refused, check_request

    request = RunRequest(runner="command", command=["python", "train.py"], args={"lr": 0.1})
    check_request(request.model_dump(exclude={"overrides"}), to_overrides(request))
    for override in ("runner.workdir=/etc", "runner.code=abc", "runner.workdir_max_mb=1"):
        with pytest.raises(Refused, match="not settable by a request"):
            check_request({}, [override])
