"""TensorBoard, Weights & Biases (offline) and MLflow (a `file:` store) each get exactly what
metrics.jsonl holds, from rank 0 alone: one real 2-rank run with all three on, read back with
each library's own reader."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.trainer.harness import BIN, launch_trainer, read_metrics

pytestmark = pytest.mark.slow

WANDB_PROJECT = "trainstack-test"
# MLflow 3 refuses file stores unless this opt-out is set (see test_mlflow_store_refusal_...).
MLFLOW_FILE_STORE_ENV = {"MLFLOW_ALLOW_FILE_STORE": "true"}
Series = dict[str, dict[int, float]]  # metric name -> step -> value


@dataclass
class LoggedRun:
    run_dir: Path
    wandb_dir: Path
    mlflow_uri: str
    expected: Series


def series(records: list[dict]) -> Series:
    """What the sinks are given: every number of every line but the step itself."""
    by_key: Series = defaultdict(dict)
    for record in records:
        for key, value in record.items():
            if key != "step" and isinstance(value, int | float):
                by_key[key][record["step"]] = value
    return dict(by_key)


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> LoggedRun:
    work = tmp_path_factory.mktemp("loggers")
    wandb_dir, mlflow_uri = work / "wandb", f"file:{work / 'mlruns'}"
    wandb_dir.mkdir()
    overrides = [
        "trainer.max_steps=4",
        "trainer.eval_interval=2",  # eval lines (eval_loss) reach the sinks too
        "trainer.metrics.tensorboard=true",
        f"trainer.metrics.wandb_project={WANDB_PROJECT}",
        f"trainer.metrics.mlflow_tracking_uri={mlflow_uri}",
    ]
    # No API key on purpose: offline mode must not need one.
    env = {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(wandb_dir),
        "WANDB_API_KEY": "",
        **MLFLOW_FILE_STORE_ENV,
    }
    result = launch_trainer(work, 2, overrides, env=env).finish()
    assert result.returncode == 0, result.stderr
    assert "skipped" not in result.stderr, result.stderr
    expected = series(read_metrics(result.run_dir))
    assert sorted(expected["loss"]) == [1, 2, 3, 4] and sorted(expected["eval_loss"]) == [2, 4]
    return LoggedRun(Path(result.run_dir), wandb_dir, mlflow_uri, expected)


def assert_same_series(logged_series: Series, expected: Series, rel: float) -> None:
    assert set(logged_series) == set(expected)
    for key, values in expected.items():
        assert sorted(logged_series[key]) == sorted(values), key
        for step, value in values.items():
            assert logged_series[key][step] == pytest.approx(value, rel=rel), (key, step)


def test_tensorboard_events_hold_the_metrics(logged: LoggedRun):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events_dir = logged.run_dir / "logs/tensorboard"
    assert len(list(events_dir.glob("events.out.tfevents.*"))) == 1  # rank 0's writer only
    accumulator = EventAccumulator(str(events_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    scalars = {
        tag: {event.step: event.value for event in accumulator.Scalars(tag)}
        for tag in accumulator.Tags()["scalars"]
    }
    assert_same_series(scalars, logged.expected, rel=1e-6)  # stored as float32


def wandb_records(wandb_file: Path) -> list[dict]:
    """The run's transaction log, decoded by wandb's own reader (`wandb leet inspect`)."""
    out = subprocess.run(
        [str(BIN / "wandb"), "leet", "inspect", "--json", str(wandb_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_wandb_offline_run_holds_the_history_without_an_api_key(logged: LoggedRun):
    runs = list((logged.wandb_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1  # rank 0 only
    (wandb_file,) = runs[0].glob("run-*.wandb")
    records = wandb_records(wandb_file)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == WANDB_PROJECT
    history: Series = defaultdict(dict)
    for record in records:
        if record["type"] != "history":
            continue
        step = int(record["history"]["step"]["num"])
        for key, value in record["history"]["item"].items():
            if not key.startswith("_"):  # wandb's own _runtime, _step, _timestamp
                history[key][step] = value
    assert_same_series(dict(history), logged.expected, rel=1e-12)


def test_wandb_online_without_an_api_key_is_skipped_with_a_warning(monkeypatch, capsys):
    from trainer.metrics import _wandb

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    assert _wandb(WANDB_PROJECT, {}) == []
    assert "WANDB_API_KEY is not" in capsys.readouterr().err


def test_mlflow_run_holds_the_metric_history(logged: LoggedRun, monkeypatch):
    from mlflow.tracking import MlflowClient

    for key, value in MLFLOW_FILE_STORE_ENV.items():
        monkeypatch.setenv(key, value)
    client = MlflowClient(tracking_uri=logged.mlflow_uri)
    (experiment,) = client.search_experiments()
    (run,) = client.search_runs([experiment.experiment_id])  # rank 0 only
    assert run.info.status == "FINISHED"
    history = {
        key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        for key in run.data.metrics
    }
    assert_same_series(history, logged.expected, rel=1e-12)
    config = client.download_artifacts(run.info.run_id, "config.json", str(logged.run_dir))
    assert json.loads(Path(config).read_text())["trainer"]["max_steps"] == 4


def test_mlflow_store_refusal_is_skipped_with_one_warning(tmp_path, monkeypatch, capsys):
    """Rank 0 alone sets up the sinks: a refusal warns and training goes on (metrics.jsonl
    keeps every figure) rather than failing one rank under the others."""
    from trainer.metrics import _mlflow

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    assert _mlflow(f"file:{tmp_path / 'mlruns'}", {}) == []
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith("[trainer] warning: trainer.metrics.mlflow_tracking_uri='file:")
    assert "MLFLOW_ALLOW_FILE_STORE" in warning and warning.endswith("; skipped")
