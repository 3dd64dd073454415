"""`trainer.resume_from`: another run's committed checkpoint a new run starts from.

The value is a run dir (its newest committed checkpoint) or one step directory of it,
`<run_dir>/checkpoints/step-<N>`, local or s3://. (`trainstack launch` also takes `RUN[/step-N]`
and turns it into one of these under storage.root.) The run's own committed checkpoints always
win: the source is used only while the run has none, so a restart resumes from its own.

`locate` (one listing, no torch: `jobs` calls it at launch) finds the step and says in one line
why a value is not a committed checkpoint; `check_fits` (the trainer, before any rank starts)
also checks the step's files against its metadata and the model's tensors against the saved
ones, so a checkpoint of another architecture is bad input (exit 2), not a failed load.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.checkpoints import MARKER, parse_step, step_dir
from contract.run_dir import CHECKPOINTS
from trainer.checkpoint.layout import inspect_step, step_files
from trainer.errors import ConfigError
from trainer.storage import RunStorage, StorageError, open_run_storage

KEY = "trainer.resume_from"
ALLOWED = (
    "a run dir with a committed checkpoint or its checkpoints/step-N directory (local or "
    "s3://), or RUN[/step-N] under storage.root"
)


@dataclass(frozen=True)
class ResumeSource:
    storage: RunStorage
    """The source run dir."""
    step: int
    files: dict[str, int]
    """The step's files (name -> size) as `locate` listed them."""

    @property
    def uri(self) -> str:
        return self.storage.uri(step_dir(self.step))


def split_step_dir(value: str) -> tuple[str, int | None]:
    """(run dir, step) of `<run_dir>/checkpoints/step-<N>`; (value, None) for anything else."""
    head, _, leaf = value.rstrip("/").rpartition("/")
    run_dir, _, parent = head.rpartition("/")
    step = parse_step(leaf)
    if parent == CHECKPOINTS and step is not None and run_dir:
        return run_dir, step
    return value, None


def locate(value: str) -> ResumeSource:
    """The committed checkpoint `value` names; ConfigError (one line, naming the key) when
    there is none: no such run dir, no such step, a step not committed, not a checkpoint."""
    run_dir, step = split_step_dir(value)
    try:
        storage = open_run_storage(run_dir)
        steps = step_files(storage)
    except StorageError as exc:
        raise ConfigError(f"{KEY}: {exc}; allowed: {ALLOWED}") from None
    committed = [s for s, files in steps.items() if MARKER in files]
    if step is None:
        if committed:
            return ResumeSource(storage, committed[-1], steps[committed[-1]])
        found = "has no committed checkpoint" if steps else "has no checkpoints"
        local = storage.local_path()
        if local is not None and not local.is_dir():
            found = "does not exist"
        raise ConfigError(f"{KEY}: {value!r} {found}; allowed: {ALLOWED}")
    listed = ", ".join(str(s) for s in committed) or "none"
    if step not in steps:
        raise ConfigError(
            f"{KEY}: {run_dir!r} has no checkpoint step {step}; committed steps: {listed}"
        )
    if step not in committed:
        raise ConfigError(
            f"{KEY}: {storage.uri(step_dir(step))} is not committed (no {MARKER} marker: its "
            f"save never finished); committed steps: {listed}"
        )
    return ResumeSource(storage, step, steps[step])


def check_fits(source: ResumeSource, shapes: dict[str, tuple[int, ...]]) -> None:
    """The step's files are whole and it holds exactly the model's tensors (`shapes`: name ->
    shape, as the model's state_dict names them) at the same shapes; else ConfigError."""
    report = inspect_step(source.storage, source.step, source.files)
    if report.problem:
        raise ConfigError(f"{KEY}: {source.uri} does not load: {report.problem}")
    saved = {
        key.removeprefix("model."): tuple(entry.size)
        for key, entry in report.metadata.state_dict_metadata.items()
        if key.startswith("model.") and hasattr(entry, "size")
    }
    missing = sorted(set(shapes) - set(saved))
    extra = sorted(set(saved) - set(shapes))
    wrong = [n for n in sorted(set(shapes) & set(saved)) if tuple(shapes[n]) != saved[n]]
    problems = []
    if missing:
        problems.append(f"lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if extra:
        problems.append(f"has extra {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}")
    if wrong:
        name = wrong[0]
        problems.append(
            f"{name} is {list(saved[name])}, the model needs {list(shapes[name])}"
            + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else "")
        )
    if problems:
        raise ConfigError(
            f"{KEY}: {source.uri} does not fit the model ({'; '.join(problems)}); allowed: a "
            "checkpoint of the same architecture (the model.* keys of the run that saved it)"
        )
