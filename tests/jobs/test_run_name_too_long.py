"""A RUN the file system cannot name (over NAME_MAX): the commands that look a run up say, in one
line, that there is no such run; never a traceback of the OSError."""

from __future__ import annotations

import pytest

from jobs.cli import main

LONG = "a" * 5000


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["serve-model", LONG], 2),
        (["serve-model", LONG, "backend=render", "compute=p5.48xlarge"], 2),
        (["status", LONG], 1),
        (["logs", LONG], 1),
    ],
)
def test_a_run_name_too_long_for_the_file_system_is_no_such_run(
    argv, code, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "OSError" not in err and LONG[:80] in err, err[:200]
