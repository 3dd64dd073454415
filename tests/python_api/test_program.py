"""`trainstack.launch(program=fn, args={...})`: a module-level function of the workdir runs on
every rank through runner=command, by its import path from the workdir's archive; what has
no import path is refused in one line, with nothing written."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest

import trainstack
from tests.python_api.conftest import files_under

MODULE = textwrap.dedent(
    """\
    import json, os
    from pathlib import Path


    def train(lr=0.1, note=""):
        rank = os.environ["RANK"]
        out = Path(os.environ["TRAINSTACK_RUN_DIR"]) / f"rank{rank}.json"
        out.write_text(json.dumps({"lr": lr, "note": note, "cwd": os.getcwd()}))
        print(f"rank {rank} trained with lr={lr}", flush=True)


    def outer():
        def inner():
            pass

        return inner


    class NotAFunction:
        pass
    """
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's project whose package `mine` holds the functions above."""
    root = tmp_path / "project"
    (root / "mine").mkdir(parents=True)
    (root / "mine" / "__init__.py").write_text("")
    (root / "mine" / "steps.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.chdir(root)
    for name in ("mine.steps", "mine"):  # each test's own project, not an earlier one's
        sys.modules.pop(name, None)
    yield importlib.import_module("mine.steps")
    for name in ("mine.steps", "mine"):
        sys.modules.pop(name, None)


def test_a_workdir_function_runs_on_every_rank_with_its_args(project, tmp_path):
    note = "a,b='c' [d]"
    run = trainstack.launch(
        "run_id=fn", program=project.train, args={"lr": 0.5, "note": note}, wait=True
    )
    assert run.status().state == "succeeded"
    for rank in (0, 1):  # the default: two processes on this machine
        seen = json.loads((tmp_path / "project" / "runs" / "fn" / f"rank{rank}.json").read_text())
        assert (seen["lr"], seen["note"]) == (0.5, note)
        assert seen["cwd"].endswith("/runs/fn/job/code")  # the archive's copy, not the live workdir
    assert "[default0]:rank 0 trained with lr=0.5" in list(run.logs())


@pytest.mark.parametrize(
    ("program", "args", "fragment"),
    [
        (lambda: None, None, "a lambda has no import path"),
        ("outer()", None, "outer.<locals>.inner is defined inside another function"),
        (json.dumps, None, "outside the workdir"),
        ("NotAFunction", None, "is not a function"),
        ("train", {"lr": object()}, "args: not JSON"),
        ("train", ["lr"], "args: ['lr'] is not a mapping"),
    ],
)
def test_what_has_no_import_path_is_refused_with_nothing_written(
    project, tmp_path, program, args, fragment
):
    if program == "outer()":
        program = project.outer()
    elif isinstance(program, str):
        program = getattr(project, program)
    before = files_under(tmp_path / "project")
    with pytest.raises(
        trainstack.ConfigError, match=fragment.replace("(", r"\(").replace("[", r"\[")
    ) as caught:
        trainstack.launch(program=program, args=args)
    assert caught.value.key in ("program", "args")
    assert files_under(tmp_path / "project") == before


def test_args_without_a_program_are_refused(project):
    with pytest.raises(trainstack.ConfigError, match="only with program="):
        trainstack.launch(args={"lr": 1}, dryrun=True)


def test_a_function_outside_the_given_workdir_is_refused(project, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    with pytest.raises(trainstack.ConfigError, match="outside the workdir"):
        trainstack.launch(program=project.train, workdir=other, dryrun=True)
    run = trainstack.launch(program=project.train, workdir=tmp_path / "project", dryrun=True)
    assert run.config is not None and run.config["runner"]["name"] == "command"
    assert '"mine.steps"' in " ".join(run.config["runner"]["command"])
