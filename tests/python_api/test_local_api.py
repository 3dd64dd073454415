"""The Python API on the local backend: launch, wait, status, logs, metrics, relaunch,
re-attach, sweeps, and each exception path (each test fails with its check removed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainstack
from tests.python_api.conftest import files_under
from tests.python_api.scenario import lifecycle

REPO = Path(__file__).resolve().parents[2]


def test_a_dry_run_returns_the_plan_and_request_and_writes_nothing(workdir):
    # The default job, from a directory without data/sample/: the shipped corpus (item 8).
    run = trainstack.launch("trainer.max_steps=2", dryrun=True)
    assert run.submitted is False
    assert run.plan is not None and run.plan["nodes"] == 1
    assert run.request is not None and "torchrun" in run.request
    assert run.config is not None
    assert Path(run.config["data"]["path"]).is_file()
    assert files_under(workdir) == []


def test_a_bad_override_is_a_config_error_naming_the_key_with_nothing_written(workdir):
    with pytest.raises(trainstack.ConfigError) as caught:
        trainstack.launch("trainer.max_stepz=3")
    assert caught.value.key == "trainer.max_stepz"
    assert "did you mean 'max_steps'" in str(caught.value)
    with pytest.raises(trainstack.ConfigError) as caught:
        trainstack.launch("model=nope")
    assert caught.value.key == "model"
    assert caught.value.allowed is not None and "tiny" in caught.value.allowed.split(", ")
    assert isinstance(caught.value, ValueError)
    with pytest.raises(trainstack.ConfigError, match="Hydra's flags are the CLI's"):
        trainstack.launch("-m", "trainer.lr=1,2")
    assert files_under(workdir) == []


def test_values_are_data_never_override_grammar(workdir, program):
    tricky = "a,b=c 'quoted' [x] \\"
    values = {"runner.args.note": tricky}
    run = trainstack.launch(*program, "+runner.args.note=x", values=values, dryrun=True)
    assert run.config is not None and run.config["runner"]["args"]["note"] == tricky
    with pytest.raises(trainstack.ConfigError, match="values: 'a=b' is not a config key"):
        trainstack.launch(values={"a=b": 1}, dryrun=True)
    with pytest.raises(trainstack.ConfigError) as caught:
        trainstack.launch(values={"trainer.lr": [1, 2]}, dryrun=True)  # type: ignore[dict-item]
    assert caught.value.key == "trainer.lr"
    assert files_under(workdir) == []


def test_launch_wait_status_logs_metrics_and_relaunch(workdir, program):
    run = trainstack.launch(*program, "run_id=one", "+runner.args.loss=2.0", wait=True)
    status = run.status()
    assert (status.state, status.step, status.exit_code) == ("succeeded", 3, 0)
    assert status.loss == pytest.approx(2.0 + 1 / 3)
    assert "trained 3 steps" in list(run.logs())
    assert list(run.logs(tail=1)) == ["trained 3 steps"]
    assert [m["step"] for m in run.metrics()] == [1, 2, 3]
    assert list(run.metrics_frame()["step"]) == [1, 2, 3]  # pandas: the same records
    assert run.config is not None and run.config["runner"]["args"]["loss"] == 2.0

    again = run.relaunch("job.max_restarts=1")
    assert again.id == "one"
    assert again.wait(timeout=120).state == "succeeded"
    assert trainstack.run("one").config["job"]["max_restarts"] == 1  # type: ignore[index]
    with pytest.raises(trainstack.ConfigError) as caught:  # not a key a relaunch may change
        run.relaunch("runner.args.loss=3.0")
    assert caught.value.key == "runner.args", str(caught.value)  # its record is the section


def test_a_failed_run_raises_run_failed_with_its_exit_code_and_log_tail(workdir, program):
    run = trainstack.launch(*program, "run_id=bad", "+runner.args.exit=3")
    with pytest.raises(trainstack.RunFailed) as caught:
        run.wait(timeout=120)
    failed = caught.value
    assert (failed.state, failed.exit_code) == ("failed", 3)
    assert failed.log_tail[-1] == "boom: the program failed"
    assert "run bad failed, exit code 3" in str(failed)
    with pytest.raises(trainstack.RunFailed):  # wait=True raises the same
        trainstack.launch(*program, "run_id=bad2", "+runner.args.exit=4", wait=True)


def test_a_wait_past_its_timeout_is_a_timeout_error_and_cancel_stops_the_run(workdir, program):
    run = trainstack.launch(*program, "run_id=slow", "+runner.args.sleep=60")
    with pytest.raises(TimeoutError) as caught:
        run.wait(timeout=0.5, poll=0.1)
    assert isinstance(caught.value, trainstack.WaitTimeout)
    with pytest.raises(trainstack.SubmitError, match="already running"):  # the backend refuses
        trainstack.launch(*program, "run_id=slow", "+runner.args.sleep=60")
    deadline = time.monotonic() + 30  # cancelled once it runs: its program gets SIGTERM
    while run.status().state != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    run.cancel()
    with pytest.raises(trainstack.RunFailed) as stopped:
        run.wait(timeout=60)
    assert stopped.value.state == "cancelled"
    run.cancel()  # idempotent


@pytest.mark.parametrize(
    "call",
    [
        lambda run: run.wait(timeout=-1),
        lambda run: list(run.logs(tail=-1)),
        lambda run: list(run.logs(follow=True, tail=2)),
        lambda run: list(run.logs(rank=5)),
    ],
)
def test_bad_arguments_to_a_run_are_config_errors(workdir, program, call):
    run = trainstack.launch(*program, "run_id=args", wait=True)
    with pytest.raises(trainstack.ConfigError):
        call(run)


def test_an_unknown_run_is_run_not_found(workdir):
    with pytest.raises(trainstack.RunNotFound) as caught:
        trainstack.run("nope")
    assert isinstance(caught.value, LookupError)
    assert caught.value.run_id == "nope"
    with pytest.raises(trainstack.ConfigError):
        trainstack.run("nope", backend="nowhere")
    assert trainstack.runs() == []


def test_another_process_reattaches_by_id(workdir, program):
    run = trainstack.launch(*program, "run_id=shared", wait=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = (
        "import trainstack; r = trainstack.run('shared'); s = r.status(); "
        "print(s.state, s.step, [x.id for x in trainstack.runs()])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["succeeded", "3", "['shared']"], out.stderr[-2000:]
    assert [r.id for r in trainstack.runs(state="succeeded")] == [run.id]
    assert trainstack.runs(state="failed") == []


def test_a_sweep_runs_every_point_and_ranks_them(workdir, program):
    sweep = trainstack.sweep(*program, "+runner.args.loss=0", axes={"runner.args.loss": [2.0, 1.0]})
    assert [r.id for r in sweep.runs] == [f"{sweep.id}-0", f"{sweep.id}-1"]
    assert [s.state for s in sweep.wait(timeout=120)] == ["succeeded", "succeeded"]
    table = sweep.table()
    assert [(row["runner.args.loss"], row["step"]) for row in table] == [(2.0, 3), (1.0, 3)]
    assert table[1]["loss"] == pytest.approx(1 + 1 / 3)
    assert sweep.best("loss").id == f"{sweep.id}-1"
    assert sweep.best("loss", mode="max").id == f"{sweep.id}-0"
    assert sorted(r.id for r in trainstack.runs(sweep=sweep.id)) == [r.id for r in sweep.runs]
    with pytest.raises(trainstack.ConfigError):
        sweep.best("nothing-recorded")
    with pytest.raises(trainstack.ConfigError, match="mode: 'median'"):
        sweep.best("loss", mode="median")  # type: ignore[arg-type]


def test_a_sweep_with_a_bad_point_submits_nothing(workdir, program):
    with pytest.raises(trainstack.ConfigError) as caught:
        trainstack.sweep(*program, axes={"trainer.max_steps": [2, "many"]})
    assert "trainer.max_steps" in str(caught.value)
    for axes in ({}, {"trainer.lr": "1e-3"}, {"+trainer.lr": [1]}, {"trainer.lr": []}):
        with pytest.raises(trainstack.ConfigError):
            trainstack.sweep(*program, axes=axes)  # type: ignore[arg-type]
    assert files_under(workdir) == []


def test_a_point_that_cannot_start_cancels_the_points_started_before_it(workdir, program):
    busy = trainstack.launch(*program, "run_id=fixed-1", "+runner.args.sleep=60")
    try:
        with pytest.raises(trainstack.SubmitError, match="point 1") as caught:
            trainstack.sweep(
                *program,
                "+runner.args.sleep=5",
                "+runner.args.loss=0",
                axes={"runner.args.loss": [1.0, 2.0]},
                sweep_id="fixed",
            )
        assert "already running" in str(caught.value)
        with pytest.raises(trainstack.RunFailed) as first:
            trainstack.run("fixed-0").wait(timeout=60)
        assert first.value.state == "cancelled"
    finally:
        busy.cancel()
        with pytest.raises(trainstack.RunFailed):
            busy.wait(timeout=60)


def test_the_shared_scenario_on_the_local_backend(workdir, program):
    lifecycle(
        lambda *overrides: trainstack.launch(*program, "+runner.args.sleep=120", *overrides),
        trainstack.run,
    )
