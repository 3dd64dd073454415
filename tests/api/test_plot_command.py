"""`trainstack plot`: PNG and HTML from run dirs' metrics.jsonl, runs overlaid, sweeps
coloured by their swept value, missing keys tolerated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jobs.cli import main


def run_dir(root: Path, run_id: str, steps, lr=1e-3, sweep=None, keys=True) -> Path:
    path = root / run_id
    (path / "logs").mkdir(parents=True)
    lines = []
    for step in steps:
        record = {"step": step, "loss": 4.0 - step / 100, "tokens_seen": 1024 * step}
        if keys:
            record |= {
                "throughput/tokens_per_s": 900.0,
                "mfu/percent": 12.5,
                "memory/max_rss_gib": 2.0,
            }
        lines.append(record)
    lines.append({"step": steps[-1], "eval_loss": 3.5})
    text = "\n".join(json.dumps(r) for r in lines) + '\n{"message": "a note"}\n{"step": '
    (path / "logs" / "metrics.jsonl").write_text(text)
    (path / "config.yaml").write_text(f"run_dir: {path}\ntrainer:\n  lr: {lr}\n  max_steps: 50\n")
    state = {"run_id": run_id, "backend": "local", "state": "succeeded", "sweep_id": sweep}
    (path / "job").mkdir()
    (path / "job" / "state.json").write_text(json.dumps(state))
    return path


def test_png_of_several_runs_tolerates_missing_keys(tmp_path, capsys):
    from PIL import Image

    root = tmp_path / "runs"
    run_dir(root, "a", [10, 20, 30])
    run_dir(root, "b", [10, 20], keys=False)  # an older trainer: loss only
    out = tmp_path / "ab.png"
    code = main(["plot", "a", str(root / "b"), "-o", str(out), f"storage.root={root}"])
    assert code == 0, capsys.readouterr().err
    image = Image.open(out)
    assert image.format == "PNG" and image.size[0] > 1000
    assert f"wrote {out} (2 run(s))" in capsys.readouterr().out


def test_html_holds_every_point_and_the_sweep_colours(tmp_path):
    root = tmp_path / "runs"
    for index, lr in enumerate((1e-4, 1e-3, 1e-2)):
        run_dir(root, f"sw-{index}", [10, 20, 30, 40], lr=lr, sweep="sw")
    run_dir(root, "other", [10], sweep="not-this-one")
    out = tmp_path / "sweep.html"
    assert main(["plot", "--sweep", "sw", "-o", str(out), f"storage.root={root}"]) == 0
    page = out.read_text()
    figure = json.loads(re.search(r'id="trainstack-figure">(.*?)</script>', page).group(1))
    assert [r["label"] for r in figure["runs"]] == [
        "sw-0 (trainer.lr=0.0001)",
        "sw-1 (trainer.lr=0.001)",
        "sw-2 (trainer.lr=0.01)",
    ]
    colours = [r["color"] for r in figure["runs"]]
    assert len(set(colours)) == 3
    charts = {c["id"]: c for c in figure["charts"]}
    loss = charts["loss_step"]["series"]
    assert [len(s["x"]) for s in loss] == [4, 1] * 3  # train and eval per run
    assert charts["loss_tokens"]["series"][1]["x"] == [40 * 1024]  # eval placed at its tokens
    assert "uPlot" in page and "<script src=" not in page  # self-contained


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plot"], "give RUN [RUN ...] or --sweep ID"),
        (["plot", "a", "--sweep", "s"], "give RUN [RUN ...] or --sweep ID"),
        (["plot", "a", "-o", "a.svg"], "-o a.svg: unknown format; allowed: .png, .html"),
        (["plot", "--sweep", "nothing"], "sweep nothing: no runs found"),
        (["plot", "absent"], "no run 'absent': nothing at"),
    ],
)
def test_bad_plot_requests_are_one_line(tmp_path, capsys, argv, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main([*argv, f"storage.root={tmp_path / 'runs'}"])
    assert code != 0
    assert message in capsys.readouterr().err


def test_mfu_is_plotted_only_where_a_run_has_it():
    """A CPU run logs `mfu/percent: null` (no known peak): no MFU chart, not an empty one."""
    from jobs.plot.charts import figure
    from jobs.plot.metrics import RunMetrics

    cpu = RunMetrics("cpu", [{"step": s, "loss": 3.0, "mfu/percent": None} for s in (1, 2)])
    gpu = RunMetrics("gpu", [{"step": s, "loss": 3.0, "mfu/percent": 41.5} for s in (1, 2)])
    assert "mfu" not in [c["id"] for c in figure([cpu])["charts"]]
    (mfu,) = [c for c in figure([cpu, gpu])["charts"] if c["id"] == "mfu"]
    assert [(s["run_id"], s["y"]) for s in mfu["series"]] == [("gpu", [41.5, 41.5])]


def test_eval_loss_is_drawn_unlike_training_loss(tmp_path):
    """Dashed, a marker on every point and its own legend entry, in the PNG as in the HTML and
    the dashboard (which draw the same figure; the browser test checks uPlot's series)."""
    from jobs.plot.charts import figure
    from jobs.plot.metrics import read_run
    from jobs.plot.png import draw

    root = tmp_path / "runs"
    run = read_run("a", str(run_dir(root, "a", list(range(10, 500, 10)))))
    drawn = figure([run])
    loss = next(c for c in drawn["charts"] if c["id"] == "loss_step")
    train, evaluation = loss["series"]
    assert (train["label"], train["dash"], train["markers"]) == ("a train loss", False, False)
    assert (evaluation["label"], evaluation["dash"], evaluation["markers"]) == (
        "a eval loss",
        True,
        True,
    )
    axes = draw(drawn, "a").axes[0]
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert lines["a train loss"].get_linestyle() == "-"
    assert lines["a train loss"].get_marker() in (None, "None", "")  # 49 points: a plain line
    assert lines["a eval loss"].get_linestyle() == "--"
    assert lines["a eval loss"].get_marker() == "o"
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["a train loss", "a eval loss"]


def test_a_long_run_is_drawn_at_the_charts_width(tmp_path):
    """300,000-point series would only weigh the HTML down: each is cut to about 4 points per
    bucket, keeping its extremes and every evaluation."""
    from jobs.commands.plot import PLOT_WIDTH

    root = tmp_path / "runs"
    steps = list(range(1, 20_001))
    run_dir(root, "long", steps)
    out = tmp_path / "long.html"
    assert main(["plot", "long", "-o", str(out), f"storage.root={root}"]) == 0
    page = out.read_text()
    figure = json.loads(re.search(r'id="trainstack-figure">(.*?)</script>', page).group(1))
    loss = next(c for c in figure["charts"] if c["id"] == "loss_step")
    train = loss["series"][0]
    assert PLOT_WIDTH < len(train["x"]) <= 4 * PLOT_WIDTH
    assert min(train["y"]) == 4.0 - 20_000 / 100 and max(train["y"]) == 4.0 - 1 / 100
    assert figure["runs"][0]["points"] == len(steps) + 1  # the legend counts every line
