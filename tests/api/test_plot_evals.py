"""Issue 45 item 3: `trainstack plot` draws a run's `trainstack eval` scores by step beside
the loss (each task's main metric a series; an endpoint score only where the export has
none; unreadable results left out); a run without evals is drawn as before."""

from __future__ import annotations

import json
import re
from pathlib import Path

from jobs.cli import main
from jobs.plot.charts import MAX_EVAL_SERIES, figure
from jobs.plot.metrics import RunMetrics
from jobs.plot.png import draw
from tests.api.test_plot_command import run_dir
from trainer.evaluation.results import EvalSummary

CHARTS = ["loss_step", "loss_tokens", "throughput", "mfu", "memory"]


def scored(path: Path, name: str, results: dict | str) -> None:
    (path / "eval" / name).mkdir(parents=True)
    text = results if isinstance(results, str) else json.dumps({"results": results})
    (path / "eval" / name / "results.json").write_text(text)


def mc(acc: float) -> dict:
    return {"acc,none": acc, "acc_stderr,none": 0.1, "acc_norm,none": acc / 2, "alias": "ts_mc"}


def html_figure(out: Path) -> dict:
    page = out.read_text()
    return json.loads(re.search(r'id="trainstack-figure">(.*?)</script>', page).group(1))


def test_the_scores_are_drawn_by_step_beside_the_loss(tmp_path):
    root = tmp_path / "runs"
    path = run_dir(root, "a", [10, 20, 30])
    gen = {"exact_match,strict-match": 0.5, "exact_match,flexible-extract": 0.75}
    scored(path, "step-00000010", {"ts_mc": mc(0.25), "gsm": gen})
    scored(path, "step-00000020", {"ts_mc": mc(0.5), "gsm": gen})
    scored(path, "step-00000020-endpoint", {"ts_mc": mc(0.9)})  # the export's stands
    scored(path, "step-00000025-endpoint", {"ts_mc": mc(0.375)})  # the only score there:
    scored(path, "step-00000025", " ")  # the export's results are unreadable
    scored(path, "step-00000030", "{not json")  # unreadable: left out
    out = tmp_path / "a.html"
    assert main(["plot", "a", "-o", str(out), f"storage.root={root}"]) == 0
    charts = html_figure(out)["charts"]
    assert [c["id"] for c in charts] == ["loss_step", "eval_scores", *CHARTS[1:]]
    scores = charts[1]
    assert (scores["title"], scores["x_label"]) == ("eval scores", "step")
    by_label = {s["label"]: (s["x"], s["y"]) for s in scores["series"]}
    assert by_label == {
        "ts_mc acc": ([10, 20, 25], [0.25, 0.5, 0.375]),
        "gsm exact_match (strict-match)": ([10, 20], [0.5, 0.5]),
    }
    assert all(s["dash"] and s["markers"] for s in scores["series"])
    assert len({s["color"] for s in scores["series"]}) == 2  # one run: a colour per task
    png = tmp_path / "a.png"
    assert main(["plot", "a", "-o", str(png), f"storage.root={root}"]) == 0


def test_without_evals_the_plot_is_unchanged(tmp_path):
    root = tmp_path / "runs"
    run_dir(root, "a", [10, 20])
    (root / "a" / "eval" / "step-00000010").mkdir(parents=True)  # cut short: no results.json
    out = tmp_path / "a.html"
    assert main(["plot", "a", "-o", str(out), f"storage.root={root}"]) == 0
    assert [c["id"] for c in html_figure(out)["charts"]] == CHARTS


def summary(step: int, scores: dict, via: str = "export") -> EvalSummary:
    return EvalSummary(f"step-{step:08d}", step, via, scores)


def test_several_runs_take_their_colour_and_name_and_many_tasks_are_cut():
    tasks = {f"t{i:02d}": {"acc,none": i / 100} for i in range(MAX_EVAL_SERIES + 3)}
    a = RunMetrics("a", [{"step": 1, "loss": 3.0}], evals=[summary(1, tasks)])
    b = RunMetrics("b", [{"step": 1, "loss": 2.0}], evals=[summary(1, {"x": {"acc,none": 1}})])
    drawn = figure([a, b])
    colours = {r["run_id"]: r["color"] for r in drawn["runs"]}
    (scores,) = [c for c in drawn["charts"] if c["id"] == "eval_scores"]
    assert len(scores["series"]) == MAX_EVAL_SERIES + 1
    assert (
        scores["series"][0]["label"] == "a t00 acc" and scores["series"][-1]["label"] == "b x acc"
    )
    assert {s["color"] for s in scores["series"] if s["run_id"] == "a"} == {colours["a"]}
    assert "3 left out" in scores["title"]


def test_the_png_draws_the_scores_dashed_and_names_with_dollars_as_written():
    """A `$` would start matplotlib's math mode: the name would lose its dollars."""
    evals = [summary(s, {"$\\nope$ task": {"acc,none": s / 10}}) for s in (1, 2)]
    run = RunMetrics("a", [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5}], evals=evals)
    fig = draw(figure([run]), "a")
    axes = next(ax for ax in fig.axes if ax.get_title() == "eval scores")
    (line,) = axes.get_lines()
    assert line.get_linestyle() == "--" and line.get_marker() == "o"
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [0.1, 0.2]
    fig.canvas.draw()
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [r"\$\nope\$ task acc"]
