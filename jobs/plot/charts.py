"""What a run's pictures show, as plain data: `figure(runs)` -> charts of labelled series.

PNG (png.py), the HTML file and the dashboard all render this one description, so the three
never disagree about which metric is on which axis. Several runs are overlaid, one colour
each; the runs of a sweep are coloured by their swept value (viridis when one numeric key is
swept, else one colour per distinct combination) and labelled with it. Runs with `trainstack
eval` results get an `eval scores` chart beside the loss: each task's main metric by step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from jobs.plot.metrics import RunMetrics


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    x: str
    """Record key on the x axis: `step` or `tokens_seen`."""
    x_label: str
    y_label: str
    ys: tuple[tuple[str, str], ...]
    """(record key, series name); evaluation series are drawn dashed, with a marker on every
    point, and named "eval loss" beside "train loss"."""
    optional: bool = False
    """Left out when no run has a point (MFU: null without a known device peak, as on CPU)."""


EVAL_LOSS = ("eval_loss", "eval loss")
EVALUATION_KEYS = frozenset({"eval_loss"})

CHARTS = (
    Chart("loss_step", "loss", "step", "step", "loss", (("loss", "train loss"), EVAL_LOSS)),
    Chart(
        "loss_tokens",
        "loss against tokens",
        "tokens_seen",
        "tokens",
        "loss",
        (("loss", "train loss"), EVAL_LOSS),
    ),
    Chart(
        "throughput",
        "throughput",
        "step",
        "step",
        "tokens/s",
        (("throughput/tokens_per_s", "tokens/s"),),
    ),
    Chart("mfu", "MFU", "step", "step", "MFU (%)", (("mfu/percent", "MFU"),), optional=True),
    Chart(
        "memory",
        "peak memory",
        "step",
        "step",
        "GiB",
        (
            ("memory/max_allocated_gib", "allocated"),
            ("memory/max_reserved_gib", "reserved"),
            ("memory/max_rss_gib", "RSS"),
        ),
    ),
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _with_tokens(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Evaluation lines carry no `tokens_seen`: give them the training line's at their step."""
    tokens = {r["step"]: r["tokens_seen"] for r in records if "tokens_seen" in r}
    return [
        r
        if "tokens_seen" in r or r["step"] not in tokens
        else {**r, "tokens_seen": tokens[r["step"]]}
        for r in records
    ]


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(
            _flatten(value, f"{prefix}{key}." if isinstance(value, dict) else f"{prefix}{key}")
        )
    return flat


def swept_values(runs: list[RunMetrics]) -> dict[str, dict[str, Any]]:
    """run id -> {config key: value} for the keys whose values differ between the runs
    (run_dir aside). Runs whose config is not written yet get {}."""
    flat = {r.run_id: _flatten(r.config) for r in runs if r.config}
    keys = sorted({k for f in flat.values() for k in f if k != "run_dir"})
    differing = [k for k in keys if len({repr(f.get(k)) for f in flat.values()}) > 1]
    return {r.run_id: {k: flat.get(r.run_id, {}).get(k) for k in differing} for r in runs}


def _hex(rgba: tuple[float, ...]) -> str:
    return "#" + "".join(f"{round(c * 255):02x}" for c in rgba[:3])


def run_colors(runs: list[RunMetrics], sweep: bool) -> dict[str, tuple[str, str]]:
    """run id -> (colour, label)."""
    from matplotlib import colormaps  # lazy: matplotlib, for charts alone

    if not sweep:
        palette = colormaps["tab10"]
        return {r.run_id: (_hex(palette(i % 10)), r.run_id) for i, r in enumerate(runs)}
    swept = swept_values(runs)
    labels = {
        run_id: run_id
        + (f" ({', '.join(f'{k}={v}' for k, v in values.items())})" if values else "")
        for run_id, values in swept.items()
    }
    keys = sorted({k for values in swept.values() for k in values})
    numbers = [_number(values.get(keys[0])) for values in swept.values()] if len(keys) == 1 else []
    if numbers and all(n is not None for n in numbers):
        low, high = min(numbers), max(numbers)
        logscale = low > 0 and high / low >= 10  # learning rates, batch sizes
        scale = (lambda v: math.log(v)) if logscale else (lambda v: v)
        span = (scale(high) - scale(low)) or 1.0
        viridis = colormaps["viridis"]
        return {
            run_id: (_hex(viridis(0.9 * (scale(n) - scale(low)) / span)), labels[run_id])
            for run_id, n in zip(swept, numbers, strict=True)
        }
    combos = sorted({repr(values) for values in swept.values()})
    palette = colormaps["tab10"]
    return {
        run_id: (_hex(palette(combos.index(repr(values)) % 10)), labels[run_id])
        for run_id, values in swept.items()
    }


EVAL_SCORES = "eval_scores"
MAX_EVAL_SERIES = 12
"""Tasks drawn per run (a group such as mmlu reports dozens of subtasks): the first ones."""


def metric_name(metric: str) -> str:
    """`acc`, `exact_match (strict-match)`: lm-eval's `metric,filter` read out."""
    name, _, kind = metric.partition(",")
    return name + (f" ({kind})" if kind and kind != "none" else "")


def metric_label(task: str, metric: str) -> str:
    return f"{task} {metric_name(metric)}"


def eval_series(evals: list) -> dict[str, list[tuple[int, float]]]:
    """Task metric -> (step, value) by step: each task's main metric (the first it lists, as
    `status` and `runs` show it); at a step scored both ways, the export's score stands."""
    chosen: dict[int, Any] = {}
    for summary in evals:
        if summary.error is None and (summary.step not in chosen or summary.via == "export"):
            chosen[summary.step] = summary
    series: dict[str, list[tuple[int, float]]] = {}
    for step in sorted(chosen):
        for task, metrics in chosen[step].scores.items():
            if metrics:
                metric, value = next(iter(metrics.items()))
                series.setdefault(metric_label(task, metric), []).append((step, value))
    return series


def eval_chart(runs: list[RunMetrics], colors: dict[str, tuple[str, str]]) -> dict | None:
    """The `eval scores` chart (None when no run has a score): one series per run and task;
    one run's tasks get a colour each, several runs' their run's colour."""
    from matplotlib import colormaps  # lazy: matplotlib, for charts alone

    palette = colormaps["tab10"]
    series, left_out = [], 0
    for run in runs:
        color, label = colors[run.run_id]
        found = eval_series(run.evals)
        left_out += max(0, len(found) - MAX_EVAL_SERIES)
        for index, (name, points) in enumerate(list(found.items())[:MAX_EVAL_SERIES]):
            series.append(
                {
                    "run_id": run.run_id,
                    "label": f"{label} {name}" if len(runs) > 1 else name,
                    "color": color if len(runs) > 1 else _hex(palette(index % 10)),
                    "dash": True,
                    "markers": True,
                    "x": [float(step) for step, _ in points],
                    "y": [value for _, value in points],
                }
            )
    if not series:
        return None
    more = f" (first {MAX_EVAL_SERIES} tasks a run; {left_out} left out)" if left_out else ""
    return {
        "id": EVAL_SCORES,
        "title": f"eval scores{more}",
        "x_label": "step",
        "y_label": "score",
        "series": series,
    }


def figure(runs: list[RunMetrics], sweep: bool = False) -> dict[str, Any]:
    """{"runs": [{run_id, label, color, points}], "charts": [{id, title, x_label, y_label,
    series: [{run_id, label, color, dash, markers, x, y}]}]}; series with no point are left
    out, and optional charts without any series; `eval_scores` follows the loss where a run
    has `trainstack eval` results (`RunMetrics.evals`). `dash` and `markers`: evaluation, drawn
    unlike training in the PNG, HTML and dashboard."""
    colors = run_colors(runs, sweep)
    charts = []
    for chart in CHARTS:
        series = []
        for run in runs:
            color, label = colors[run.run_id]
            records = _with_tokens(run.records)
            for key, name in chart.ys:
                points = [
                    (x, y)
                    for r in records
                    if (x := _number(r.get(chart.x))) is not None
                    and (y := _number(r.get(key))) is not None
                ]
                if points:
                    series.append(
                        {
                            "run_id": run.run_id,
                            "label": f"{label} {name}" if len(chart.ys) > 1 else label,
                            "color": color,
                            "dash": key in EVALUATION_KEYS,
                            "markers": key in EVALUATION_KEYS,
                            "x": [p[0] for p in points],
                            "y": [p[1] for p in points],
                        }
                    )
        if chart.optional and not series:
            continue
        charts.append(
            {
                "id": chart.id,
                "title": chart.title,
                "x_label": chart.x_label,
                "y_label": chart.y_label,
                "series": series,
            }
        )
        if chart.id == "loss_step" and (scores := eval_chart(runs, colors)) is not None:
            charts.append(scores)  # beside the loss
    return {
        "runs": [
            {
                "run_id": r.run_id,
                "label": colors[r.run_id][1],
                "color": colors[r.run_id][0],
                "points": r.points,
            }
            for r in runs
        ],
        "charts": charts,
    }
