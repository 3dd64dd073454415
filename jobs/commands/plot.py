"""`trainstack plot RUN [RUN ...] | --sweep ID [-o out.png|out.html] [overrides ...]`

Loss and eval loss against step and tokens, tokens/s, MFU and memory from each run's
logs/metrics.jsonl, and beside the loss each task's `trainstack eval` score by step (the run's
eval/, e.g. from `eval.every_checkpoint`); several runs overlaid, a sweep's runs coloured by
their swept value. RUN is a run id (under storage.root, as for `checkpoints`) or a run dir
(path or s3:// URI); a sweep's runs are found like `trainstack runs --sweep ID` finds them.
`.png` is drawn with matplotlib, `.html` is one self-contained interactive page (uPlot).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.backends.base import BackendError
from jobs.commands.run_lookup import add_common_arguments, backends_for, existing_run_dir, fail
from jobs.plot.charts import figure
from jobs.plot.metrics import MetricsFile, RunMetrics
from jobs.plot.page import standalone_html
from jobs.plot.png import write_png
from trainer.evaluation.results import run_evals

FORMATS = (".png", ".html")
PLOT_WIDTH = 2000
"""Buckets per series (at most about 4 points each): more than a chart's pixels in either
format, so a long run's 300,000 lines make a light HTML file that looks the same."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sweep", metavar="ID", help="every run of this sweep, coloured by value")
    parser.add_argument("-o", "--output", type=Path, help="out.png or out.html (default: PNG)")
    add_common_arguments(parser)
    parser.usage = "trainstack plot (RUN [RUN ...] | --sweep ID) [-o out.png|out.html] [overrides]"


def run_dirs(args: argparse.Namespace, names: list[str]) -> list[tuple[str, str | None]]:
    """(run id, run dir) of every run to draw."""
    if args.sweep is None:
        return [(Path(n.rstrip("/")).name, existing_run_dir(n, args.overrides)) for n in names]
    found = {}
    for backend in backends_for(args):
        for status in backend.list_runs(sweep_id=args.sweep):
            found.setdefault(status.run_id, status.run_dir)
    return sorted(found.items())


def run(args: argparse.Namespace) -> int:
    names = [a for a in args.overrides if "=" not in a]
    args.overrides = [a for a in args.overrides if "=" in a]
    if bool(names) == (args.sweep is not None):
        return fail("plot", "give RUN [RUN ...] or --sweep ID", 2)
    output = args.output or Path(f"{args.sweep or Path(names[0].rstrip('/')).name}.png")
    if output.suffix not in FORMATS:
        return fail("plot", f"-o {output}: unknown format; allowed: {', '.join(FORMATS)}", 2)
    try:
        targets = run_dirs(args, names)
    except BackendError as err:
        return fail("plot", str(err))
    if not targets:
        return fail("plot", f"sweep {args.sweep}: no runs found")
    runs = [
        MetricsFile(run_id, run_dir).refresh().downsampled(PLOT_WIDTH)
        if run_dir
        else RunMetrics(run_id)
        for run_id, run_dir in targets
    ]
    for metrics, (_, run_dir) in zip(runs, targets, strict=True):
        metrics.evals = run_evals(run_dir)
    empty = [r.run_id for r in runs if not r.records]
    if len(empty) == len(runs):
        return fail("plot", f"no metrics yet in {', '.join(str(d) for _, d in targets)}")
    title = f"sweep {args.sweep}" if args.sweep else ", ".join(r.run_id for r in runs)
    drawn = figure(runs, sweep=args.sweep is not None)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix == ".png":
        write_png(drawn, output, title)
    else:
        output.write_text(standalone_html(drawn, title))
    for run_id in empty:
        print(f"{run_id}: no metrics yet")
    print(f"wrote {output} ({len(runs)} run(s))")
    return 0
