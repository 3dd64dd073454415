"""Issue 45 item 3: the local supervisor scores a run's checkpoints once torchrun exited 0
(`eval.every_checkpoint`), and the evaluator it starts. The supervisor runs for real, on
stand-in commands (no torch, no lm-eval): the run is succeeded whatever the scoring does, its
message says in one line how that went, `launch` follows the run to the end of the scoring,
`cancel` stops it, a failed or cancelled training is not scored; the evaluator scores every
committed checkpoint without results and the others when one fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from contract.checkpoints import MARKER, step_dir
from jobs.backends import run_state
from jobs.backends.base import CANCELLED, FAILED, PENDING, SUCCEEDED, BackendError
from jobs.backends.local import evals
from jobs.backends.local.backend import LocalBackend
from tests.jobs.conftest import SAMPLE_DATA, build
from trainer.evaluation.config import EvalConfig
from trainer.evaluation.results import EvalSummary
from trainer.storage import open_run_storage

REPO = Path(__file__).resolve().parents[2]
RUN = "fake"


def report(pending, scored, failed=()) -> str:
    """A stand-in evaluator's Python: print a line, write the report, exit 0 or 1."""
    body = json.dumps({"pending": pending, "scored": scored, "failed": list(failed)})
    code = 1 if failed else 0
    return (
        "import pathlib, sys, time; time.sleep(1); print('[eval] stand-in scored', flush=True);"
        f"pathlib.Path('job/evals.json').write_text({body!r}); sys.exit({code})"
    )


def start(root: Path, train: str, evaluate: str | None) -> subprocess.Popen:
    """A run as LocalBackend.schedule leaves it (state.json pending, request.json), and its
    supervisor, on `python -c train` then `python -c evaluate`."""
    state_dir = root / RUN
    (state_dir / "job").mkdir(parents=True)
    run_state.write_state(
        state_dir,
        {"run_id": RUN, "backend": "local", "state": PENDING, "run_dir": str(state_dir),
         "started_at": run_state.utc_now(), "pid": None},
    )  # fmt: skip
    request = {"argv": [sys.executable, "-c", train], "env": {}, "cwd": str(state_dir)}
    if evaluate is not None:
        request["eval_argv"] = [sys.executable, "-c", evaluate]
    (state_dir / run_state.REQUEST_FILE).write_text(json.dumps(request))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.backends.local.supervisor", str(state_dir)],
        cwd=REPO,
        env=env,
    )


def state_of(root: Path) -> dict:
    return run_state.read_state(root / RUN) or {}


def wait_for(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_a_succeeded_run_is_scored_and_followed_to_the_end_of_it(tmp_path):
    supervisor = start(tmp_path, "print('trained')", report([2, 4], [2, 4]))
    backend = LocalBackend(str(tmp_path))
    wait_for(lambda: state_of(tmp_path).get("pid"))
    followed = list(backend.logs(RUN, follow=True))
    assert "trained" in followed
    assert "[eval] stand-in scored" in followed  # the scoring's output, followed to its end
    assert supervisor.wait(timeout=30) == 0
    state = state_of(tmp_path)
    assert (state["state"], state["exit_code"], state["evals"]) == (SUCCEEDED, 0, SUCCEEDED)
    assert state["eval_exit_code"] == 0 and state["eval_seconds"] >= 1 and not state["eval_pid"]
    status = backend.status(RUN)
    assert status.state == SUCCEEDED and status.message.startswith(
        "eval: 2 checkpoint(s) scored in"
    )


def test_a_failed_scoring_is_one_line_and_the_run_stays_succeeded(tmp_path):
    failure = [4, "ConfigError: eval.tasks: no task named 'x'\n(and a second line)"]
    supervisor = start(tmp_path, "pass", report([2, 4], [2], [failure]))
    assert supervisor.wait(timeout=60) == 0
    state = state_of(tmp_path)
    assert (state["state"], state["exit_code"], state["evals"]) == (SUCCEEDED, 0, FAILED)
    assert state["message"] == (
        "eval: 1 of 2 checkpoint(s) failed, first step 4: ConfigError: eval.tasks: no task "
        "named 'x' (and a second line); `trainstack eval fake --step 4 eval.tasks=...` scores "
        "it again"
    )


def test_a_scoring_that_dies_without_a_report_is_named_in_the_message(tmp_path):
    supervisor = start(tmp_path, "pass", "import os; os._exit(3)")
    assert supervisor.wait(timeout=60) == 0
    state = state_of(tmp_path)
    assert (state["state"], state["evals"]) == (SUCCEEDED, FAILED)
    assert state["message"] == (
        "eval: stopped with exit 3 after 0 of 0 checkpoint(s) scored; `trainstack logs fake` "
        "shows why"
    )


def test_a_failed_training_is_not_scored(tmp_path):
    touch = "import pathlib; pathlib.Path('scored').write_text('')"
    supervisor = start(tmp_path, "import sys; sys.exit(1)", touch)
    assert supervisor.wait(timeout=60) == 1
    state = state_of(tmp_path)
    assert state["state"] == FAILED and "evals" not in state
    assert not (tmp_path / RUN / "scored").exists()


def test_cancel_stops_the_scoring_and_a_relaunch_waits_for_it(tmp_path):
    slow = (
        "import pathlib, time; pathlib.Path('job/evals.json').write_text("
        '\'{"pending": [2], "scored": [], "failed": []}\'); time.sleep(120)'
    )
    supervisor = start(tmp_path, "pass", slow)
    backend = LocalBackend(str(tmp_path))
    wait_for(lambda: state_of(tmp_path).get("eval_pid"))
    assert backend.status(RUN).state == SUCCEEDED  # trained: recorded before the scoring
    job = build([f"data.path={SAMPLE_DATA}", f"storage.root={tmp_path}"], run_id=RUN)
    with pytest.raises(BackendError, match="fake is still scoring its checkpoints"):
        backend.schedule(backend.dryrun(job))
    started = time.monotonic()
    backend.cancel(RUN)
    assert supervisor.wait(timeout=60) == 0 and time.monotonic() - started < 30
    state = state_of(tmp_path)
    assert (state["state"], state["evals"], state["eval_exit_code"]) == (
        SUCCEEDED, CANCELLED, 143)  # fmt: skip
    assert state["message"] == "eval: cancelled after 0 of 1 checkpoint(s) scored"


# -- the evaluator ---------------------------------------------------------------------------


def committed(run_dir: Path, *steps: int) -> None:
    for step in steps:
        (run_dir / step_dir(step)).mkdir(parents=True)
        (run_dir / step_dir(step) / MARKER).write_text("")


def results(run_dir: Path, name: str) -> None:
    (run_dir / "eval" / name).mkdir(parents=True)
    (run_dir / "eval" / name / "results.json").write_text('{"results": {}}')


def test_unscored_steps_are_the_committed_ones_without_export_results(tmp_path):
    committed(tmp_path, 2, 4, 6, 8)
    (tmp_path / step_dir(10)).mkdir(parents=True)  # not committed
    results(tmp_path, "step-00000002")
    results(tmp_path, "step-00000004-endpoint")  # through an endpoint: not the export's
    (tmp_path / "eval" / "step-00000006").mkdir()  # cut short: no results.json
    assert evals.unscored_steps(open_run_storage(str(tmp_path))) == [4, 6, 8]
    assert evals.unscored_steps(open_run_storage(str(tmp_path / "nothing"))) == []


def fake_harness(monkeypatch, failing: set[int]) -> list[int]:
    """trainer.evaluation.harness and .tasks stood in for: no torch, no lm-eval."""
    seen: list[int] = []

    def evaluate_run(run_dir, cfg, *, step=None, endpoint=None, manager=None):
        seen.append(step)
        assert manager == "index"  # built once, shared by every checkpoint
        if step in failing:
            raise RuntimeError(f"boom at {step}\ntraceback...")
        summary = EvalSummary(f"step-{step:08d}", step, "export", {"ts_mc": {"acc,none": 0.5}})
        return types.SimpleNamespace(summary=summary, destination=f"{run_dir}/eval", seconds=1.0)

    harness = types.ModuleType("trainer.evaluation.harness")
    harness.evaluate_run = evaluate_run  # type: ignore[attr-defined]
    tasks = types.ModuleType("trainer.evaluation.tasks")
    tasks.task_manager = lambda cfg: "index"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trainer.evaluation.harness", harness)
    monkeypatch.setitem(sys.modules, "trainer.evaluation.tasks", tasks)
    return seen


def run_evaluator(run_dir: Path, settings: str | None = None) -> tuple[int, dict]:
    given = settings or json.dumps({"tasks": ["ts_mc"]})
    path = run_dir / "job" / "evals.json"
    code = evals.main([f"--run-dir={run_dir}", f"--report={path}", f"--settings={given}"])
    return code, json.loads(path.read_text())


def test_the_evaluator_scores_the_others_when_one_fails(tmp_path, monkeypatch, capsys):
    committed(tmp_path, 2, 4, 6)
    results(tmp_path, "step-00000006")
    seen = fake_harness(monkeypatch, failing={2})
    code, written = run_evaluator(tmp_path)
    assert code == 1 and seen == [2, 4]
    assert written == {"pending": [2, 4], "scored": [4], "failed": [[2, "RuntimeError: boom at 2"]]}
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("[eval] ") for line in lines)
    assert "[eval] step 2 failed: RuntimeError: boom at 2" in lines
    assert any(line.startswith("[eval] step 4 in 1.0 s: ts_mc acc=0.5000") for line in lines)


def test_the_evaluator_with_nothing_to_score_or_bad_settings(tmp_path, monkeypatch):
    committed(tmp_path, 2)
    results(tmp_path, "step-00000002")
    seen = fake_harness(monkeypatch, failing=set())
    assert run_evaluator(tmp_path) == (0, {"pending": [], "scored": [], "failed": []})
    code, written = run_evaluator(tmp_path, json.dumps({"tasks": []}))
    assert code == 2 and written["failed"][0][0] is None
    assert "eval.tasks: name at least one task" in written["failed"][0][1]
    code, written = run_evaluator(tmp_path, json.dumps({"taskz": ["x"]}))
    assert code == 2 and "taskz" in written["failed"][0][1]
    assert seen == []
    assert EvalConfig(tasks=["x"]).include_defaults  # the settings' own defaults
