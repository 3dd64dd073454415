"""A run's own code writes its eval/ folder, so a results.json read back may be anything: too
deeply nested for the parser, numbers past a float, ints past Python's digit limit. Each is
listed with an error (as invalid JSON is), never raised into `runs`, `status` or the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.backends.base import RunStatus
from jobs.commands.runs import newest_eval
from trainer.evaluation.results import MAX_DEPTH, EvalSummary, list_evals, read_eval, run_evals
from trainer.storage import open_run_storage

DEEP = "[" * 100_000
"""Far past the parser's recursion limit, well under MAX_RESULTS_BYTES."""


def plant(run_dir: Path, name: str, body: str) -> None:
    (run_dir / "eval" / name).mkdir(parents=True, exist_ok=True)
    (run_dir / "eval" / name / "results.json").write_text(body)


HOSTILE = {
    "deep list": (DEEP, "results.json nested over 64 levels"),
    "deep object": ('{"a":' * 100_000, "results.json nested over 64 levels"),
    "int past digit limit": ("1" * 5000, "results.json is not valid JSON"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_results_json_reads_as_an_error(tmp_path: Path, case: str) -> None:
    body, message = HOSTILE[case]
    plant(tmp_path, "step-00000010", body)
    summary = read_eval(open_run_storage(str(tmp_path)), "step-00000010")
    assert summary == EvalSummary("step-00000010", 10, "export", error=message)


def test_an_int_past_a_float_is_left_out(tmp_path: Path) -> None:
    big = "1" + "0" * 400  # parses as an int; float() of it overflows
    body = '{"results": {"t": {"acc,none": ' + big + ', "f1,none": 0.5}}}'
    plant(tmp_path, "step-00000010", body)
    summary = read_eval(open_run_storage(str(tmp_path)), "step-00000010")
    assert summary is not None and summary.error is None
    assert summary.scores == {"t": {"f1,none": 0.5}}


def test_runs_and_status_list_a_deep_results_json_as_unreadable(tmp_path: Path) -> None:
    plant(tmp_path, "step-00000010", json.dumps({"results": {"t": {"acc,none": 0.5}}}))
    plant(tmp_path, "step-00000020", DEEP)
    evals = run_evals(str(tmp_path))
    assert [e.error for e in evals] == [None, "results.json nested over 64 levels"]
    assert list_evals(open_run_storage(str(tmp_path))) == evals
    run = RunStatus("r", "succeeded", "local", run_dir=str(tmp_path))
    assert newest_eval(run).startswith("20: unreadable: results.json nested")


def deep_results(levels: int) -> str:
    """A results.json nested `levels` deep, with brackets and escapes inside a string."""
    lists: object = []
    for _ in range(levels - 2):  # the outer object and the innermost list are two levels
        lists = [lists]
    text = '[{ \\" \\\\" ' + "[" * 200  # an escaped quote, an escaped backslash, brackets
    return json.dumps({"results": {"t": {"acc,none": 0.5}}, "deep": lists, "s": text})


def test_brackets_in_strings_do_not_count_and_64_levels_are_read(tmp_path: Path) -> None:
    plant(tmp_path, "step-00000010", deep_results(MAX_DEPTH))
    plant(tmp_path, "step-00000020", deep_results(MAX_DEPTH + 1))
    first, second = run_evals(str(tmp_path))
    assert (first.error, first.scores) == (None, {"t": {"acc,none": 0.5}})
    assert second.error == "results.json nested over 64 levels"
