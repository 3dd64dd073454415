"""A figure (charts.figure) as one PNG: a grid of panels, one per chart, runs overlaid."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def write_png(figure: dict[str, Any], path: Path, title: str) -> None:
    draw(figure, title).savefig(path, dpi=110)


def _text(value: str) -> str:
    """As written: a `$` would start matplotlib's math mode (a task or run name may have one)."""
    return value.replace("$", r"\$")


def draw(figure: dict[str, Any], title: str):
    """The matplotlib Figure (tests read its lines)."""
    import matplotlib  # lazy: matplotlib, for PNG output alone

    matplotlib.use("Agg")  # no display; also safe in threads of a server
    from matplotlib.figure import Figure  # lazy: matplotlib, for PNG output alone

    charts = figure["charts"]
    columns = 3
    rows = math.ceil(len(charts) / columns)
    fig = Figure(figsize=(5.2 * columns, 3.6 * rows + 0.6), layout="constrained")
    fig.suptitle(_text(title))
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    for ax, chart in zip(axes, charts, strict=False):
        ax.set_title(_text(chart["title"]))
        ax.set_xlabel(chart["x_label"])
        ax.set_ylabel(chart["y_label"])
        ax.grid(alpha=0.3)
        for series in chart["series"]:
            ax.plot(
                series["x"],
                series["y"],
                color=series["color"],
                linestyle="--" if series["dash"] else "-",
                marker="o" if series.get("markers") or len(series["x"]) < 30 else None,
                markersize=4 if series.get("markers") else 3,
                label=_text(series["label"]),
            )
        if chart["series"]:
            ax.legend(fontsize="x-small")
        else:
            ax.text(0.5, 0.5, "no points", ha="center", va="center", transform=ax.transAxes)
    for ax in axes[len(charts) :]:
        ax.set_visible(False)
    return fig
