"""`job/state.json` in a run dir: how local and rendered runs are found after the launcher
exits (format documented in jobs/backends/base.py). Writes are atomic (temp file + rename)."""

from __future__ import annotations

import errno
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.run_dir import JOB_DIR
from jobs.backends.base import UNKNOWN, RunStatus
from jobs.plot.metrics import LAST_METRICS

STATE_FILE = f"{JOB_DIR}/state.json"
REQUEST_FILE = f"{JOB_DIR}/request.json"
"""What the local backend asks its supervisor to run (argv, env, cwd)."""
OUTPUT_LOG = f"{JOB_DIR}/output.log"
CANCEL_MARKER = f"{JOB_DIR}/cancel-requested"
EVAL_REPORT = f"{JOB_DIR}/evals.json"
"""What the latest attempt's `eval.every_checkpoint` scored and what failed
(jobs.backends.local.evals writes it, its supervisor reads it)."""


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


MAX_STATE_BYTES = 64 * 1024
"""state.json is a few hundred bytes; the run's own code can write the run dir, so a larger
(or unparsable, or non-object) one reads as no state rather than failing every listing."""


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        with open(run_dir / STATE_FILE, "rb") as fh:
            data = fh.read(MAX_STATE_BYTES + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except OSError as err:  # a run id the file system refuses as a name: no such run
        if err.errno == errno.ENAMETOOLONG:
            return None
        raise
    if len(data) > MAX_STATE_BYTES:
        return None
    try:
        loaded = json.loads(data, parse_constant=lambda _: None)
    except (ValueError, RecursionError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _field(state: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """`state[key]` when it has the type a status field takes, else `default`."""
    value = state.get(key, default)
    ok = isinstance(value, kind) and not (isinstance(value, bool) and bool not in kind)
    return value if ok else default


def write_atomic(path: Path, text: str) -> None:
    """Readers (another shell's `trainstack runs`) see the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_state(run_dir: Path, state: dict[str, Any]) -> None:
    write_atomic(run_dir / STATE_FILE, json.dumps(state, indent=2) + "\n")


def update_state(run_dir: Path, **changes: Any) -> dict[str, Any]:
    state = {**(read_state(run_dir) or {}), **changes}
    write_state(run_dir, state)
    return state


def last_metrics(run_dir: str | Path | None) -> tuple[int | None, float | None]:
    """Step and loss of the last training line of `<run_dir>/logs/metrics.jsonl`, local or
    s3; (None, None) when there is none yet or it cannot be read from here. Read
    incrementally (jobs.plot.metrics.LastMetrics): a poll reads only what was appended."""

    if not run_dir:
        return None, None
    try:
        return LAST_METRICS.get(str(run_dir))
    except Exception:  # absent yet, or unreadable from here: progress is decoration
        return None, None


def to_status(run_dir: Path, state: dict[str, Any] | None) -> RunStatus:
    step, loss = last_metrics(run_dir)
    state = state or {}
    text = (str, type(None))
    return RunStatus(
        run_id=_field(state, "run_id", (str,), run_dir.name),
        state=_field(state, "state", (str,), UNKNOWN),
        backend=_field(state, "backend", (str,), UNKNOWN),
        sweep_id=_field(state, "sweep_id", text, None),
        nodes=_field(state, "nodes", (int,), 1),
        started_at=_field(state, "started_at", text, None),
        finished_at=_field(state, "finished_at", text, None),
        exit_code=_field(state, "exit_code", (int, type(None)), None),
        last_step=step,
        last_loss=loss,
        message=_field(state, "message", (str,), ""),
        run_dir=str(run_dir),
    )


def list_states(root: Path, backend: str) -> list[tuple[Path, dict[str, Any]]]:
    """(run dir, state) of every run under `root` made by `backend`, oldest first."""
    found = []
    for path in sorted(root.glob(f"*/{STATE_FILE}")):
        run_dir = path.parent.parent
        state = read_state(run_dir)
        if state and state.get("backend") == backend:
            found.append((run_dir, state))
    return sorted(found, key=lambda item: item[1].get("started_at") or "")
