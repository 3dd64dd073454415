"""`trainstack <command> ...`: a small dispatcher; each command lives in jobs/commands/.

Commands are registered in jobs/commands/__init__.py (COMMANDS). Modules load only when their
command runs, so start-up stays light.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from jobs.commands import COMMANDS, module_name
from jobs.commands.launch import LAUNCH_ENV


def main(argv: list[str] | None = None) -> int:
    if LAUNCH_ENV in os.environ:  # `trainstack launch` exec'd this process as its Hydra app
        from jobs.app import run_app  # lazy: Hydra and the launch pipeline, for launch alone

        return run_app()
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="trainstack", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if argv[:1] in (["-sc"], ["--shell-completion"]):
        # The completion script Hydra installed asks `trainstack -sc query=<shell>`: answered
        # here for every line but `trainstack launch ...`, which is Hydra's (jobs/completion.py).
        from jobs.completion import query  # lazy: start-up time; only the completion asks

        answer = query(argv, os.environ.get("COMP_LINE"), os.environ.get("COMP_POINT"))
        if answer is not None:
            print(answer)
            return 0
        argv = ["launch", *argv]
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints usage and exits 2
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(module_name(name))
    if hasattr(module, "main"):
        return int(module.main(rest) or 0)
    command_parser = argparse.ArgumentParser(prog=f"trainstack {name}")
    module.add_arguments(command_parser)
    args = command_parser.parse_intermixed_args(rest)  # options may follow overrides
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
