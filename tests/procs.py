"""Processes of this machine found through /proc, by an environment marker and command line.

Every process the suite starts inherits `SESSION_MARKER` (set by tests/conftest.py), so the
session-end check can tell its own leftovers from anything else running here; tests find a
run's ranks by their `TRAINSTACK_RUN_ID` and `RANK`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SESSION_MARKER = "TRAINSTACK_TEST_SESSION"
EVALUATOR = "jobs.backends.local.evals"
"""The local backend's `eval.every_checkpoint` process (started by the supervisor)."""


@dataclass(frozen=True)
class Proc:
    pid: int
    argv: tuple[str, ...]
    env: dict[str, str]

    @property
    def is_rank(self) -> bool:
        """A trainer worker (`python -m trainer ...` started by torchrun)."""
        return "TORCHELASTIC_RUN_ID" in self.env and _module(self.argv) == "trainer"

    @property
    def is_trainstack(self) -> bool:
        """trainer ranks, torchrun / trainer.launch, the local backend's supervisor and its
        evaluator."""
        module = _module(self.argv)
        names = {Path(a).name for a in self.argv[:2]}
        own = ("trainer", "trainer.launch", "jobs.backends.local.supervisor", EVALUATOR)
        return module in own or "torchrun" in names


def _module(argv: tuple[str, ...]) -> str | None:
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None


def _read(pid: int) -> Proc | None:
    try:
        raw_argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        raw_env = Path(f"/proc/{pid}/environ").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:  # gone meanwhile, or not ours
        return None
    if state == "Z":  # a zombie holds nothing; its parent reaps it
        return None
    env = dict(
        item.split("=", 1) for item in raw_env.decode(errors="replace").split("\0") if "=" in item
    )
    argv = tuple(a for a in raw_argv.decode(errors="replace").split("\0") if a)
    return Proc(pid, argv, env)


def processes(**env: str) -> list[Proc]:
    """Live processes (other than this one) whose environment has every `key=value` given."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        proc = _read(int(entry.name))
        if proc and all(proc.env.get(k) == v for k, v in env.items()):
            found.append(proc)
    return found


def ranks_of(run_id: str, program: str | None = None) -> dict[int, int]:
    """{global rank: pid} of the live ranks of local run `run_id`: the built-in trainer's, or
    those whose command line has `program` (a user's script, a runner's module)."""
    return {
        int(p.env["RANK"]): p.pid
        for p in processes(TRAINSTACK_RUN_ID=run_id)
        if (p.is_rank if program is None else program in p.argv) and "RANK" in p.env
    }
