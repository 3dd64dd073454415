"""`trainstack launch [--dryrun] [--wait] [--skip-preflight] [Hydra flags] [overrides ...]`

A Hydra app (jobs/app.py): compose -> validate -> materialize -> print the plan -> hand the job
to its backend; `-m` sweeps through Hydra's sweeper and launchers (jobs/sweep.py). Bad input is
one line on stderr and exit 2, before anything is written or started.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn


def main(argv: Sequence[str]) -> NoReturn:
    from jobs.app import exec_launch

    exec_launch(argv)
