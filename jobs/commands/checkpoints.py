"""`trainstack checkpoints RUN [overrides ...]`: a run's checkpoints, local or on S3.

RUN is a run id (its run dir is `<storage.root>/<RUN>`, storage.root from the composed config
and overrides such as stack=prod) or a run dir itself (a path or s3:// URI). Columns: step,
committed or not, size, and whether every file the step's metadata names is there at full
size (else which are missing or short). The trainer owns the format and does the checking
(`trainer.checkpoint.list_checkpoints`); this only prints it.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from contract.run_dir import CHECKPOINTS
from jobs.backends.base import BackendError
from jobs.commands import arguments
from jobs.commands.run_lookup import existing_run_dir, fail
from trainer.checkpoint import list_checkpoints
from trainer.storage import StorageError, open_run_storage

add_arguments = arguments.checkpoints
"""The CLI builds the parser with it; completion reads jobs.commands.arguments alone."""

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(nbytes: int) -> str:
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{nbytes} B" if unit == 0 else f"{value:.1f} {UNITS[unit]}"


def run(args: argparse.Namespace) -> int:
    try:
        storage = open_run_storage(existing_run_dir(args.run, args.overrides))
        reports = list_checkpoints(storage)
        others = [] if reports else storage.list_dir(CHECKPOINTS)
    except (BackendError, StorageError) as err:
        return fail("checkpoints", str(err))
    if others:  # a runner=command program's own files: its format, not trainstack's
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        print(
            f"{storage.uri(CHECKPOINTS)} holds your program's own files ({shown}), not "
            "the built-in trainer's checkpoints: your program resumes from them itself"
        )
        return 0
    if not reports:
        print(f"no checkpoints under {storage.uri(CHECKPOINTS)}")
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
