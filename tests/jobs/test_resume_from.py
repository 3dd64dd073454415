"""`trainer.resume_from` at launch: RUN[/step-N] resolves under storage.root (local or S3) into
the path the trainer reads; a run, step or path that is not a committed checkpoint is one line
naming the key, exit 2, nothing written or submitted. (The trainer's side, with real torchrun
runs: tests/trainer/test_trainer_resume_from.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobs.conftest import CLUSTER, SAMPLE_DATA, build

DATA = f"data.path={SAMPLE_DATA}"


def fake_step(run_dir: Path, step: int, committed: bool) -> None:
    """A step directory as the layout listing sees it (the launch check reads no shard)."""
    step_dir = run_dir / f"checkpoints/step-{step:08d}"
    step_dir.mkdir(parents=True)
    (step_dir / ".metadata").write_bytes(b"metadata")
    if committed:
        (step_dir / "COMMITTED").write_text(f"{step}\n")


@pytest.fixture
def runs(workdir: Path) -> Path:
    """storage.root `runs` (the local default) holding run `src`: step 4 committed, step 8 not;
    and `empty`, a run dir without checkpoints."""
    root = workdir / "runs"
    fake_step(root / "src", 4, committed=True)
    fake_step(root / "src", 8, committed=False)
    (root / "empty" / "logs").mkdir(parents=True)
    return root


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_run_names_resolve_under_storage_root(runs: Path):
    root = f"storage.root={runs}", DATA
    step = build([*root, "trainer.resume_from=src/step-4"]).spec.trainer_config["trainer"]
    assert step["resume_from"] == f"{runs}/src/checkpoints/step-00000004"
    newest = build([*root, "trainer.resume_from=src"]).spec.trainer_config["trainer"]
    assert newest["resume_from"] == f"{runs}/src"
    path = f"{runs}/src/checkpoints/step-00000004"
    given = build([*root, f"trainer.resume_from={path}", "trainer.resume_weights_only=true"])
    assert given.spec.trainer_config["trainer"]["resume_from"] == path
    assert given.spec.trainer_config["trainer"]["resume_weights_only"] is True


BAD = {
    "unknown run": (
        ["trainer.resume_from=nope"],
        "trainer.resume_from",
        "runs/nope' does not exist",
    ),
    "missing step": (
        ["trainer.resume_from=src/step-6"],
        "trainer.resume_from",
        "no checkpoint step 6",
    ),
    "uncommitted step": (
        ["trainer.resume_from=src/step-8"],
        "trainer.resume_from",
        "not committed",
    ),
    "not a checkpoint": (
        ["trainer.resume_from=empty"],
        "trainer.resume_from",
        "has no checkpoints",
    ),
    "another runner": (
        ["runner=command", "runner.command=[python,-u,train.py]", "trainer.resume_from=src"],
        "trainer.resume_from",
        "built-in trainer only; allowed with runner=command: null",
    ),
    "weights only alone": (
        ["trainer.resume_weights_only=true"],
        "trainer.resume_weights_only",
        "needs trainer.resume_from",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_resume_from_is_one_line_exit_2_nothing_written(cli, workdir, runs, case):
    overrides, key, problem = BAD[case]
    before = snapshot(workdir)
    result = cli("launch", DATA, *overrides)
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].count(f"{key}:") == 1, result.err
    assert problem in lines[0], lines[0]
    assert result.out == ""
    assert snapshot(workdir) == before


def test_a_relaunch_with_its_own_checkpoints_is_not_checked_against_the_source(runs: Path):
    """Once the run has a committed checkpoint the trainer resumes from it: the source (here
    gone) is not asked for."""
    fake_step(runs / "mine", 2, committed=True)
    job = build([f"storage.root={runs}", DATA, "trainer.resume_from=gone/step-4"], run_id="mine")
    assert (
        job.spec.trainer_config["trainer"]["resume_from"]
        == f"{runs}/gone/checkpoints/step-00000004"
    )


def test_s3_run_names_resolve_and_are_checked_on_s3(s3_direct, s3_bucket):
    client = s3_direct.client()
    for key in (
        "src/checkpoints/step-00000004/COMMITTED",
        "src/checkpoints/step-00000008/.metadata",
    ):
        client.put_object(Bucket=s3_bucket, Key=f"runs/{key}", Body=b"x")
    cluster = [*CLUSTER, "compute=g5.12xlarge", f"storage.root=s3://{s3_bucket}/runs"]
    job = build([*cluster, "trainer.resume_from=src"])
    assert job.spec.trainer_config["trainer"]["resume_from"] == f"s3://{s3_bucket}/runs/src"
    with pytest.raises(ValueError, match=r"trainer.resume_from: .*step-00000008 is not committed"):
        build([*cluster, "trainer.resume_from=src/step-8"])
    with pytest.raises(ValueError, match=r"trainer.resume_from: .*src/nope' has no checkpoints"):
        build([*cluster, f"trainer.resume_from=s3://{s3_bucket}/runs/src/nope"])


def test_the_launch_check_needs_no_torch(runs: Path):
    """The API image validates launches and carries no torch."""
    import subprocess
    import sys

    code = (
        "import sys; from jobs.resume_from import check_resume_from; "
        "from trainer.checkpoint.source import locate; "
        f"locate({str(runs / 'src')!r}); assert 'torch' not in sys.modules, 'torch imported'"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_source_on_the_fsx_mount_is_left_to_the_pods():
    """Only the pods see FSx: the launch resolves the run name and leaves the check to the
    trainer; a path on this machine is still refused for a cluster backend."""
    fsx = ["storage.fsx=true", "storage.fsx_claim=fsx-claim", "compute=g5.12xlarge", *CLUSTER]
    job = build([*fsx, "trainer.resume_from=/fsx/runs/src/checkpoints/step-00000004"])
    assert (
        job.spec.trainer_config["trainer"]["resume_from"]
        == "/fsx/runs/src/checkpoints/step-00000004"
    )
    with pytest.raises(
        ValueError, match=r"^trainer.resume_from: '/elsewhere/src' is a path on this"
    ):
        build([*fsx, "trainer.resume_from=/elsewhere/src"])
