"""Errors that name the real problem: a run that does not exist is said to not exist (not to
have no metrics or checkpoints), a program's own checkpoint files are not "no checkpoints",
a missing RUN is the only thing missing, a mistyped key gets the near one, and
runner.command takes one string as a shell would split it."""

from __future__ import annotations

import pytest

from tests.jobs.conftest import build


@pytest.mark.parametrize(
    "command",
    [("plot", "nosuch"), ("export", "nosuch", "--to", "out"), ("checkpoints", "nosuch")],
)
def test_commands_on_a_run_that_does_not_exist_say_so(cli, workdir, command):
    result = cli(*command)
    assert result.code != 0
    assert result.err.startswith(f"trainstack {command[0]}: no run 'nosuch': nothing at runs/")
    assert result.err.count("\n") == 1, result.err
    assert not (workdir / "out").exists()


def test_checkpoints_of_a_programs_own_files_are_named_not_denied(cli, workdir):
    (workdir / "runs/mlp2/checkpoints").mkdir(parents=True)
    (workdir / "runs/mlp2/checkpoints/step-000050.pt").write_bytes(b"x")
    result = cli("checkpoints", "mlp2")
    assert result.code == 0
    assert "no checkpoints" not in result.out.lower()
    assert "your program's own files (step-000050.pt)" in result.out


def test_status_without_a_run_asks_for_the_run_only(cli):
    result = cli("status")
    assert result.code == 2
    assert result.err.rstrip().endswith("the following arguments are required: RUN")


def test_a_mistyped_key_gets_the_near_one(cli):
    for typed, near in (("modle=tiny", "model"), ("trainer.lrr=0.1", "lr")):
        result = cli("launch", "--dryrun", typed)
        assert result.code == 2 and f"did you mean {near!r}" in result.err, result.err
    assert "check the spelling" in cli("launch", "--dryrun", "zzz=1").err


def test_runner_command_takes_one_string_split_as_a_shell_would():
    base = ["runner=command", "backend=local"]
    job = build([*base, "runner.command='python -u \"my train.py\" --x 1'"], run_id="cmd")
    assert list(job.cfg.runner.command) == ["python", "-u", "my train.py", "--x", "1"]
    numbers = build([*base, "runner.command=[python,train.py,--steps,5,--f,true]"], run_id="c")
    assert list(numbers.cfg.runner.command) == ["python", "train.py", "--steps", "5", "--f", "true"]
