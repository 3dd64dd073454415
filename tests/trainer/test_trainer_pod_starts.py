"""trainer.pod_starts: a PyTorchJob replica's starts, counted in the run dir, bound its
recreations by job.max_restarts (exit 2 past them); the count file is untrusted input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from contract.config import EXIT_BAD_INPUT
from contract.run_dir import POD_NAME_ENV, POD_STARTS_DIR
from testing_support.s3_server import MotoS3
from trainer.pod_starts import MAX_BYTES, check
from trainer.storage import open_run_storage

MASTER = "run-a-master-0"


def env(run_dir: str, pod: str = MASTER) -> dict[str, str]:
    return {"TRAINSTACK_RUN_DIR": run_dir, POD_NAME_ENV: pod}


def starts_until_refused(run_dir: str, max_restarts: int, pod: str = MASTER) -> list:
    return [check(env(run_dir, pod), max_restarts) for _ in range(max_restarts + 2)]


def one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("max_restarts", [0, 1, 3])
def test_a_replica_starts_max_restarts_plus_one_times(tmp_path, capsys, max_restarts):
    run_dir = str(tmp_path / "run")
    assert starts_until_refused(run_dir, max_restarts) == [None] * (max_restarts + 1) + [
        EXIT_BAD_INPUT
    ]
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"started {max_restarts + 2} times, over job.max_restarts={max_restarts}" in said
    assert f"delete {tmp_path}/run/{POD_STARTS_DIR}/{MASTER} " in said  # how to go on
    assert check(env(run_dir), max_restarts) == EXIT_BAD_INPUT  # and stays refused
    count = (tmp_path / "run" / POD_STARTS_DIR / MASTER).read_text()
    assert count == f"{max_restarts + 3}\n"


def test_each_replica_has_its_own_count(tmp_path):
    run_dir = str(tmp_path / "run")
    assert starts_until_refused(run_dir, 1)[-1] == EXIT_BAD_INPUT
    assert check(env(run_dir, "run-a-worker-0"), 1) is None


def test_the_count_lives_in_an_s3_run_dir(s3_direct: MotoS3, s3_bucket: str):
    run_dir = f"s3://{s3_bucket}/runs/run-a"
    assert starts_until_refused(run_dir, 1) == [None, None, EXIT_BAD_INPUT]
    stored = open_run_storage(run_dir).read_text(f"{POD_STARTS_DIR}/{MASTER}")
    assert stored == "3\n"


@pytest.mark.parametrize(
    "content",
    [b"two\n", b"-1\n", b"", b"\xff\xfe", b"1e9\n", b"9" * (MAX_BYTES + 1), b"1\n" * 5_000_000],
    ids=["word", "negative", "empty", "binary", "float", "just-over", "10MB"],
)
def test_a_file_that_is_not_a_count_is_refused_in_one_line(tmp_path, capsys, content):
    starts = tmp_path / "run" / POD_STARTS_DIR / MASTER
    starts.parent.mkdir(parents=True)
    starts.write_bytes(content)
    assert check(env(str(tmp_path / "run")), 3) == EXIT_BAD_INPUT
    said = one_line(capsys)
    assert str(starts) in said and "allowed: the start count" in said, said
    assert len(said) < 400
    assert starts.read_bytes() == content  # nothing written


def test_a_huge_s3_file_is_refused_without_reading_it(s3_direct, s3_bucket, capsys):
    run_dir = f"s3://{s3_bucket}/runs/run-a"
    open_run_storage(run_dir).write_bytes(f"{POD_STARTS_DIR}/{MASTER}", b"7" * 10_000_000)
    assert check(env(run_dir), 3) == EXIT_BAD_INPUT
    assert f"over {MAX_BYTES} bytes" in one_line(capsys)


@pytest.mark.parametrize("pod", ["", "../config.yaml", "a/b", "UPPER", "x" * 300])
def test_a_pod_name_that_is_no_object_name_is_refused(tmp_path, capsys, pod):
    assert check(env(str(tmp_path / "run"), pod), 3) == EXIT_BAD_INPUT
    assert POD_NAME_ENV in one_line(capsys)
    assert not (tmp_path / "run").exists()


def test_storage_that_does_not_answer_starts_the_program_uncounted(capsys):
    assert check(env("gs://elsewhere/run"), 0) is None
    assert "start not counted" in one_line(capsys)


def run_module(run_dir, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer.pod_starts", *argv],
        env={**os.environ, **env(run_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_module_starts_the_program_then_refuses_with_exit_2(tmp_path):
    program = ["--", sys.executable, "-c", "import sys; print('ran'); sys.exit(137)"]
    first = run_module(str(tmp_path), "--max-restarts=0", *program)
    assert (first.returncode, first.stdout) == (137, "ran\n"), first.stderr
    second = run_module(str(tmp_path), "--max-restarts=0", *program)
    assert (second.returncode, second.stdout) == (EXIT_BAD_INPUT, ""), second.stderr
    assert "over job.max_restarts=0" in second.stderr
