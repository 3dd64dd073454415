"""The plan's runner and model lines come from what the runner answers (`builtin`,
`reads_model`), never from the words its describe line starts with."""

from __future__ import annotations

import pytest

import jobs.plan
from jobs.plan import make_plan
from jobs.runners import runner_named
from tests.jobs.conftest import CLUSTER, build

COMMAND = ["runner=command", "runner.command=[python,-u,train.py]", "compute=g6e.48xlarge"]


def lines(text: str, head: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(head)]


@pytest.fixture
def echo(monkeypatch):
    """A runner that reads no model and describes itself as `echo ...` (a new runner)."""

    class Echo(type(runner_named("command"))):
        def describe(self, cfg) -> str:
            return "echo hello"

    monkeypatch.setattr(jobs.plan, "runner_for", lambda cfg: Echo())


def test_a_runner_that_reads_no_model_has_no_model_line(echo):
    job = build([*COMMAND, *CLUSTER], run_id="echo")
    plan = str(make_plan(job.cfg, job.spec, None))
    assert lines(plan, "runner ") == ["runner   echo hello"]
    assert lines(plan, "model ") == []


def test_the_builtin_trainer_has_no_runner_line_whatever_its_describe(monkeypatch):
    builtin = runner_named("trainstack")

    class Renamed(type(builtin)):
        def describe(self, cfg) -> str:
            return "the built-in trainer"

    job = build(["compute=g6e.48xlarge", *CLUSTER], run_id="builtin")
    monkeypatch.setattr(jobs.plan, "runner_for", lambda cfg: Renamed())
    plan = str(make_plan(job.cfg, job.spec, None))
    assert lines(plan, "runner ") == []
    assert len(lines(plan, "model ")) == 1
