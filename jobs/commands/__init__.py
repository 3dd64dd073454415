"""trainstack subcommands, one module each (dispatched by jobs/cli.py).

A command module defines `add_arguments(parser)` and `run(args) -> int` (or `main(argv) -> int`
when it parses its own arguments, as `launch`, a Hydra app, does); register it with one line
in COMMANDS (the CLI's dispatcher and tab completion read it).
A command whose module imports heavy packages (torch, fastapi, Hydra) at its top keeps its
arguments in jobs/commands/arguments.py (ADD_ARGUMENTS): tab completion reads those alone.
"""

from __future__ import annotations

COMMANDS: dict[str, str] = {
    "launch": "compose, validate and run a job (or a -m sweep)",
    "runs": "list runs (--sweep ID, --state S)",
    "status": "show one run",
    "logs": "print a run's logs (-f to follow, --rank N)",
    "cancel": "cancel a run or a whole --sweep",
    "checkpoints": "list a run's checkpoints: committed, size, files complete",
    "export": "write a run's checkpoint as a Hugging Face model directory",
    "eval": "score a run's checkpoint with lm-evaluation-harness (here or via --endpoint)",
    "plot": "loss, throughput, MFU and memory of runs or a --sweep, to PNG or HTML",
    "serve": "the Training API and dashboard (HTTP)",
    "serve-model": "serve a run's checkpoint behind an OpenAI-compatible API (not `serve`)",
    "data": "data prepare: tokenize JSONL into shards + manifest (here, render or kubernetes)",
}


def module_name(command: str) -> str:
    """The module of `command`: `serve-model` lives in jobs/commands/serve_model.py."""
    return f"jobs.commands.{command.replace('-', '_')}"
