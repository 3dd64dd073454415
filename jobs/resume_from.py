"""`trainer.resume_from` at launch: `RUN[/step-N]` names a run under the same storage.root; the
trainer is given the path it stands for, and the checkpoint must be there and committed.

A value with `://`, or starting with `/` or `.`, is a path; so is anything that is not a run id
optionally followed by `/step-N` (write `./RUN/step-N` for a relative directory that looks
like one). What the trainer does with it: `trainer/checkpoint/source.py`.
"""

from __future__ import annotations

import re
from typing import Any

from contract.checkpoints import step_dir
from jobs.backend_registry import traits_of
from jobs.errors import JobConfigError
from jobs.naming import run_id_problem
from jobs.run_dirs import on_fsx, run_dir_for
from jobs.runners import runner_for
from trainer.checkpoint.layout import committed_steps
from trainer.checkpoint.source import locate
from trainer.errors import ConfigError
from trainer.storage import StorageError, open_run_storage

_RUN_STEP = re.compile(r"^(?P<run>[^/]+?)(?:/step-(?P<step>\d+))?/?\Z")


def resume_from_path(cfg: Any) -> str | None:
    """The run dir or `<run_dir>/checkpoints/step-<8 digits>` `trainer.resume_from` names."""
    value = cfg.trainer.resume_from
    if value is None or "://" in value or value.startswith(("/", ".")):
        return value
    match = _RUN_STEP.match(value)
    if not match or run_id_problem(match["run"]):
        return value
    run_dir = run_dir_for(cfg.storage.root, match["run"])
    if match["step"] is None:
        return run_dir
    return f"{run_dir}/{step_dir(int(match['step']))}"


def check_resume_from(cfg: Any) -> None:
    """The checkpoint exists and is committed (one listing; no torch). Skipped once the run
    itself has a committed checkpoint: the trainer resumes from its own then. Whether the
    checkpoint's files are whole and fit the model is the trainer's check at start (exit 2):
    it needs torch, which the API image does not carry. A path on the FSx mount is checked
    by the trainer alone."""
    path = resume_from_path(cfg)
    if path is None:
        return
    if not runner_for(cfg).builtin:  # the other runners never read it: refuse, not ignore
        raise JobConfigError(
            "trainer.resume_from",
            f"read by the built-in trainer only; allowed with runner={cfg.runner.name}: null",
        )

    if traits_of(cfg.backend.name).pods and on_fsx(cfg, path):
        return  # on the stack's FSx mount: only the pods see it, and the trainer checks it
    if cfg.run_id is not None:
        try:
            if committed_steps(open_run_storage(run_dir_for(cfg.storage.root, cfg.run_id))):
                return
        except StorageError:
            pass  # the source's own check below says what is unreachable
    try:
        locate(path)
    except ConfigError as err:
        key, _, problem = str(err).partition(": ")
        raise JobConfigError(key, problem) from None
