"""`trainstack checkpoints RUN [overrides ...]`: a run's checkpoints, local or on S3.

RUN is a run id (its run dir is `<storage.root>/<RUN>`, storage.root from the composed config
and overrides such as stack=prod) or a run dir itself (a path or s3:// URI). Columns: step,
committed or not, size, and whether every file the step's metadata names is there at full
size (else which are missing or short). The trainer owns the format and does the checking
(`trainer.checkpoint.list_checkpoints`); this only prints it.
"""

from __future__ import annotations

import argparse

from jobs.commands.run_lookup import compose_for, fail


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run id, or a run dir (path or s3:// URI)")
    parser.add_argument(
        "overrides", nargs="*", help="config overrides selecting storage.root, e.g. stack=prod"
    )


def run_dir_of(run: str, overrides: list[str]) -> str:
    if "/" in run or run.startswith("."):
        return run
    from jobs.spec import run_dir_for

    return run_dir_for(compose_for(overrides).storage.root, run)


UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(nbytes: int) -> str:
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{nbytes} B" if unit == 0 else f"{value:.1f} {UNITS[unit]}"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from trainer.checkpoint import list_checkpoints
    from trainer.storage import StorageError, open_run_storage

    run_dir = run_dir_of(args.run, args.overrides)
    try:
        storage = open_run_storage(run_dir)
        reports = list_checkpoints(storage)
    except StorageError as err:
        return fail("checkpoints", str(err))
    if not reports:
        print(f"no checkpoints under {storage.uri('checkpoints')}")
        return 0
    grid = Table(box=None, header_style="bold")
    for column in ("step", "committed", "size", "files"):
        grid.add_column(column, justify="right" if column in ("step", "size") else "left")
    for report in reports:
        files = "complete" if report.complete else report.problem
        committed = "yes" if report.committed else "no"
        grid.add_row(str(report.step), committed, size(report.size_bytes), files)
    Console(width=200).print(grid)
    return 0
