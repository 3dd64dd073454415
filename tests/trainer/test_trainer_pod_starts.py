"""trainer.pod_starts: a PyTorchJob replica's starts, counted in the run dir per submission,
bound its recreations by job.max_restarts (exit 2 past them); a new submission counts from 0;
the count file is untrusted input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from contract.config import EXIT_BAD_INPUT
from contract.run_dir import POD_NAME_ENV, POD_STARTS_DIR, SUBMISSION_ENV
from testing_support.s3_server import MotoS3
from trainer.pod_starts import MAX_BYTES, check
from trainer.storage import open_run_storage

MASTER = "run-a-master-0"
FIRST, SECOND = "2026-11-27T17:00:00Z", "2026-11-27T17:05:00Z"
"""Two submissions of one run: the job's created-at, as its pods see it."""


def env(run_dir: str, pod: str = MASTER, submission: str = FIRST) -> dict[str, str]:
    return {"TRAINSTACK_RUN_DIR": run_dir, POD_NAME_ENV: pod, SUBMISSION_ENV: submission}


def starts_until_refused(
    run_dir: str, max_restarts: int, pod: str = MASTER, submission: str = FIRST
) -> list:
    return [check(env(run_dir, pod, submission), max_restarts) for _ in range(max_restarts + 2)]


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
    assert f"in submission {FIRST}" in said and "`trainstack relaunch`" in said  # how to go on
    assert check(env(run_dir), max_restarts) == EXIT_BAD_INPUT  # and stays refused
    count = (tmp_path / "run" / POD_STARTS_DIR / MASTER).read_text()
    assert count == f"{max_restarts + 3} {FIRST}\n"


def test_a_new_submission_counts_from_0(tmp_path):
    """A relaunch (or the follower's resubmission) of a run refused on its limit starts
    again: the count is per submission; within one (a Kueue resume) it goes on."""
    run_dir = str(tmp_path / "run")
    assert starts_until_refused(run_dir, 1)[-1] == EXIT_BAD_INPUT
    assert starts_until_refused(run_dir, 1, submission=SECOND) == [None, None, EXIT_BAD_INPUT]
    assert (tmp_path / "run" / POD_STARTS_DIR / MASTER).read_text() == f"3 {SECOND}\n"
    assert check(env(run_dir, submission=FIRST), 1) is None  # any other: from 0 again


def test_an_unstamped_job_counts_across_submissions(tmp_path):
    """A job applied without the backend's stamp: empty submission, the count goes on (the
    file of the previous round's format, a bare count, reads as one of those)."""
    starts = tmp_path / "run" / POD_STARTS_DIR / MASTER
    starts.parent.mkdir(parents=True)
    starts.write_text("2\n")
    assert check(env(str(tmp_path / "run"), submission=""), 1) == EXIT_BAD_INPUT
    assert starts.read_text() == "3\n"
    assert check(env(str(tmp_path / "run")), 1) is None  # a stamped one starts over
    assert starts.read_text() == f"1 {FIRST}\n"


@pytest.mark.parametrize("submission", ["a b", "x/../y", "\n", "é", "9" * 65])
def test_a_submission_that_is_no_stamp_is_refused(tmp_path, capsys, submission):
    assert check(env(str(tmp_path / "run"), submission=submission), 3) == EXIT_BAD_INPUT
    assert SUBMISSION_ENV in one_line(capsys)
    assert not (tmp_path / "run").exists()


def test_each_replica_has_its_own_count(tmp_path):
    run_dir = str(tmp_path / "run")
    assert starts_until_refused(run_dir, 1)[-1] == EXIT_BAD_INPUT
    assert check(env(run_dir, "run-a-worker-0"), 1) is None


def test_the_count_lives_in_an_s3_run_dir(s3_direct: MotoS3, s3_bucket: str):
    run_dir = f"s3://{s3_bucket}/runs/run-a"
    assert starts_until_refused(run_dir, 1) == [None, None, EXIT_BAD_INPUT]
    stored = open_run_storage(run_dir).read_text(f"{POD_STARTS_DIR}/{MASTER}")
    assert stored == f"3 {FIRST}\n"


@pytest.mark.parametrize(
    "content",
    [
        *(b"two\n", b"-1\n", b"", b"\xff\xfe", b"1e9\n", b"9" * (MAX_BYTES + 1)),
        *(b"1\n" * 5_000_000, b"1 a/b\n", b"1 a b\n", b"x " + FIRST.encode(), b"1 \xc3\xa9\n"),
        b"1 " + b"9" * 65,
    ],
    ids=[
        *("word", "negative", "empty", "binary", "float", "just-over", "10MB"),
        *("slash", "three-fields", "no-count", "non-ascii", "long-submission"),
    ],
)
def test_a_file_that_is_not_a_count_is_refused_in_one_line(tmp_path, capsys, content):
    starts = tmp_path / "run" / POD_STARTS_DIR / MASTER
    starts.parent.mkdir(parents=True)
    starts.write_bytes(content)
    assert check(env(str(tmp_path / "run")), 3) == EXIT_BAD_INPUT
    said = one_line(capsys)
    assert str(starts) in said and "allowed: the '<count> <submission>'" in said, said
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


def run_module(run_dir, *argv: str, submission: str = FIRST) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer.pod_starts", *argv],
        env={**os.environ, **env(run_dir, submission=submission)},
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
    relaunched = run_module(str(tmp_path), "--max-restarts=0", *program, submission=SECOND)
    assert (relaunched.returncode, relaunched.stdout) == (137, "ran\n"), relaunched.stderr
