"""`trainstack <command> ...`: a small dispatcher; each command lives in jobs/commands/.

A command module defines `add_arguments(parser)` and `run(args) -> int` (or `main(argv) -> int`
when it parses its own arguments, as `launch`, a Hydra app, does); register it with one line
in COMMANDS. Modules load only when their command runs, so start-up stays light.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS: dict[str, str] = {
    "launch": "compose, validate and run a job (or a -m sweep)",
    "runs": "list runs (--sweep ID, --state S)",
    "status": "show one run",
    "logs": "print a run's logs (-f to follow, --rank N)",
    "cancel": "cancel a run or a whole --sweep",
    "checkpoints": "list a run's checkpoints: committed, size, files complete",
    "export": "write a run's checkpoint as a Hugging Face model directory",
    "plot": "loss, throughput, MFU and memory of runs or a --sweep, to PNG or HTML",
    "serve": "the Training API and dashboard (HTTP)",
    "data": "data prepare: tokenize JSONL into shards + manifest (here, render or kubernetes)",
}


def main(argv: list[str] | None = None) -> int:
    from jobs.app import LAUNCH_ENV

    if LAUNCH_ENV in os.environ:  # `trainstack launch` exec'd this process as its Hydra app
        from jobs.app import run_app

        return run_app()
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="trainstack", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if argv[:1] in (["-sc"], ["--shell-completion"]):
        # The completion script Hydra installed asks `trainstack -sc query=<shell>`: answered
        # here for every line but `trainstack launch ...`, which is Hydra's (jobs/completion.py).
        from jobs.completion import query

        answer = query(argv, os.environ.get("COMP_LINE"), os.environ.get("COMP_POINT"), COMMANDS)
        if answer is not None:
            print(answer)
            return 0
        argv = ["launch", *argv]
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints usage and exits 2
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(f"jobs.commands.{name}")
    if hasattr(module, "main"):
        return int(module.main(rest) or 0)
    command_parser = argparse.ArgumentParser(prog=f"trainstack {name}")
    module.add_arguments(command_parser)
    args = command_parser.parse_intermixed_args(rest)  # options may follow overrides
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
