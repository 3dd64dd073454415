"""Tab completion for the whole `trainstack` command line.

The script `trainstack launch --shell-completion install=bash|zsh|fish` prints is Hydra's: on
<TAB> it runs `trainstack -sc query=<shell>` with the typed line in $COMP_LINE and offers what
that prints (bash filters it by the word being typed with compgen, fish by the token). Hydra
completes a Hydra app's overrides, which is right after `trainstack launch` only; everywhere
else this module answers, without Hydra and without the network:

    trainstack <TAB>             the subcommands
    trainstack status <TAB>      the run ids here (local and rendered), for every command
                                 that takes a RUN (status, logs, cancel, checkpoints, export,
                                 plot), then that command's own flags
    trainstack runs --state <TAB>  the flag's choices; --sweep: the sweep ids here
    trainstack logs r1 -<TAB>    the command's flags

Nothing is ever printed but candidates (no usage or parse error lands in the terminal).
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from jobs.commands import COMMANDS, module_name
from jobs.commands.arguments import ADD_ARGUMENTS

RUN_COMMANDS = ("status", "logs", "cancel", "checkpoints", "export", "plot")
"""Commands whose positional argument is a run id."""
ROOT_KEYS = ("storage.root=", "backend.output_root=")
"""Overrides on the line that move where runs are (default: runs/ here)."""


def typed_line(line: str, point: str | None) -> str:
    """The line up to the cursor (bash passes COMP_POINT; fish's line already ends there)."""
    if point and point.isdigit():
        return line[: int(point)]
    return line


def command_parser(name: str) -> argparse.ArgumentParser:
    """`name`'s parser, without loading what running the command needs (ADD_ARGUMENTS)."""
    add = ADD_ARGUMENTS.get(name) or importlib.import_module(module_name(name)).add_arguments
    parser = argparse.ArgumentParser(prog=f"trainstack {name}")
    add(parser)
    return parser


def candidates(line: str) -> list[str] | None:
    """What to offer for the last word of `line` (the word being typed, or a new one after
    a space); None: the line is `trainstack launch ...`, which Hydra completes."""
    words = line.split()
    typing = "" if not words or line[-1:].isspace() else words.pop()
    if len(words) <= 1:
        return sorted(COMMANDS)
    name = words[1]
    if name == "launch":
        return None
    if name not in COMMANDS:
        return []
    parser = command_parser(name)
    # argparse has no public listing of a parser's options; _actions is what its help reads.
    options = {s: a for a in parser._actions for s in a.option_strings}
    flags = sorted(options)
    previous = options.get(words[-1]) if len(words) > 2 else None
    if previous is not None and previous.nargs != 0:  # the flag's value is being typed
        if previous.choices:
            return [str(c) for c in previous.choices]
        return sweep_ids(words) if previous.dest == "sweep" else []
    if typing.startswith("-"):
        return flags
    given = positionals(words[2:], options)
    first = next((a for a in parser._actions if not a.option_strings and a.choices), None)
    if first is not None and not given:  # `data prepare`
        return [str(c) for c in first.choices]
    if name in RUN_COMMANDS and (not given or name == "plot"):
        return run_ids(words) or flags
    return flags


def positionals(words: list[str], options: dict[str, argparse.Action]) -> list[str]:
    """The words that are neither flags, flag values, nor key=value overrides."""
    found, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-"):
            action = options.get(word)
            skip = action is not None and action.nargs != 0
        elif "=" not in word:
            found.append(word)
    return found


def roots(words: list[str]) -> list[Path]:
    """Where runs are listed from: runs/, or what storage.root / backend.output_root on the
    line say (an s3:// storage root keeps its local state under runs/)."""
    from jobs.run_dirs import LOCAL_STATE_ROOT  # lazy: ~0.27 s on every <TAB>

    found = []
    for word in words:
        for key in ROOT_KEYS:
            if word.startswith(key):
                value = word[len(key) :]
                found.append(Path(LOCAL_STATE_ROOT if value.startswith("s3://") else value))
    return found or [Path(LOCAL_STATE_ROOT)]


def states(words: list[str]) -> list[dict]:
    from jobs.backends.run_state import STATE_FILE  # lazy: ~0.06 s on every <TAB>

    found = []
    for root in roots(words):
        for path in sorted(root.glob(f"*/{STATE_FILE}")):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # being written, or not ours: completion is best effort
    return found


def run_ids(words: list[str]) -> list[str]:
    return sorted({s["run_id"] for s in states(words) if isinstance(s.get("run_id"), str)})


def sweep_ids(words: list[str]) -> list[str]:
    return sorted({s["sweep_id"] for s in states(words) if isinstance(s.get("sweep_id"), str)})


def query(argv: list[str], line: str | None, point: str | None) -> str | None:
    """The text `trainstack -sc query=<shell>` prints, or None when Hydra should answer (a
    `launch` line, or install/uninstall)."""
    shell = argv[1].removeprefix("query=") if len(argv) == 2 else ""
    if shell not in ("bash", "zsh", "fish") or line is None:
        return None
    offered = candidates(typed_line(line, point))
    if offered is None:
        return None
    return ("\n" if shell == "fish" else " ").join(offered)
