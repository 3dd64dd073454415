"""Issue 45 item 3, end to end on the CPU: `trainstack launch eval.every_checkpoint=true`
trains a tiny run and then scores each committed checkpoint where `trainstack eval` puts its
results; `status` and `plot` show them; a relaunch that trains on scores only the checkpoint
it added."""

from __future__ import annotations

import json
import re

import pytest

from testing_support.eval_tasks import MC_TASK, write_tasks
from tests.eval.conftest import TINY, Workspace, cache_env

pytestmark = pytest.mark.slow


def test_every_checkpoint_is_scored_once_the_run_has_trained(tmp_path):
    (tmp_path / "home").mkdir()
    space = Workspace(tmp_path, write_tasks(tmp_path / "tasks", docs=4), cache_env(tmp_path))
    every = [
        "run_id=ev",
        *TINY,
        "trainer.checkpoint.interval=2",
        "eval.every_checkpoint=true",
        f"eval.tasks=[{MC_TASK}]",
        f"eval.include_path={space.tasks}",
        "eval.include_defaults=false",
    ]
    done = space.trainstack("launch", *every)
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    out = done.stdout
    assert "eval     each committed checkpoint, once trained: ts_mc" in out
    assert "[eval] scoring 2 checkpoint(s): steps 2, 4" in out
    assert re.search(r"^ev: succeeded \(eval: 2 checkpoint\(s\) scored in \d+ s\)$", out, re.M)
    run_dir = tmp_path / "runs/ev"
    for step in (2, 4):
        results = json.loads((run_dir / f"eval/step-{step:08d}/results.json").read_text())
        assert (results["trainstack"]["step"], results["trainstack"]["via"]) == (step, "export")
        assert results["trainstack"]["config"]["tasks"] == [MC_TASK]
        assert results["n-samples"][MC_TASK]["effective"] == 4
    state = json.loads((run_dir / "job/state.json").read_text())
    assert (state["state"], state["exit_code"], state["evals"]) == ("succeeded", 0, "succeeded")
    print(f"torchrun {state['torchrun_seconds']} s, scoring {state['eval_seconds']} s")

    status = space.trainstack("status", "ev")
    assert status.returncode == 0, status.stderr
    assert [x.split()[1] for x in status.stdout.splitlines() if x.startswith("eval")] == [
        "step-00000002:",
        "step-00000004:",
    ]
    page = tmp_path / "ev.html"
    assert space.trainstack("plot", "ev", "-o", str(page)).returncode == 0
    figure = json.loads(re.search(r'id="trainstack-figure">(.*?)</script>', page.read_text())[1])
    (scores,) = [c for c in figure["charts"] if c["id"] == "eval_scores"]
    assert [(s["label"], s["x"]) for s in scores["series"]] == [("ts_mc acc", [2.0, 4.0])]

    # Trained on to step 6: its checkpoint alone is scored (2 and 4 have results).
    again = space.trainstack("launch", "run_id=ev", "trainer.max_steps=6")
    assert again.returncode == 0, again.stderr + again.stdout[-3000:]
    assert "[eval] scoring 1 checkpoint(s): steps 6" in again.stdout
    assert (run_dir / "eval/step-00000006/results.json").is_file()
