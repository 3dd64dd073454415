"""The one interface every backend implements (TorchX-style verbs), and the values it trades.

    dryrun(job) -> DryRun          str(dryrun) is exactly what would be run or sent
    schedule(dryrun) -> run_id     do it (run torchrun / write files / submit)
    status(run_id) -> RunStatus
    list_runs(sweep_id=None, state=None) -> list[RunStatus]
    logs(run_id, rank=0, follow=False) -> Iterator[str]
    cancel(run_id) -> None         idempotent: cancelling a finished or unknown run is a no-op

Local runs keep their state in the run dir so `trainstack runs/status/logs/cancel` work
without the process that launched them (paths relative to `<storage.root>/<run_id>/`, or to
`runs/<run_id>/` when storage.root is s3://):

    job/state.json   {"run_id", "sweep_id", "backend": "local", "state", "run_dir", "nodes",
                      "command": [...], "attempt", "started_at", "finished_at" (ISO-8601 UTC),
                      "exit_code", "pid" (torchrun), "supervisor_pid", "torchrun_seconds",
                      "message", "ranks" (processes: what `logs --rank` can show);
                      with eval.every_checkpoint, once trained: "evals" (running, then
                      succeeded, failed or cancelled), "eval_pid", "eval_seconds",
                      "eval_exit_code"}; job/evals.json: what the scoring did
                      rewritten atomically on every change; cancel = touch
                      job/cancel-requested, then SIGTERM to "pid" (torchrun forwards it; the
                      trainer checkpoints and exits 143)
    job/output.log   torchrun's combined stdout+stderr, appended per attempt; worker lines
                      carry torchrun's `[default<rank>]:` prefix (PET_TEE=3)
    job/config.yaml  the trainer config the run was started with (`--config`)
    logs/metrics.jsonl, checkpoints/, config.yaml   written by the trainer itself

Rendered runs: `<backend.output_root>/<run_id>/manifests.yaml` (multi-document, kubectl-
applyable) and `job/state.json` with state "rendered".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from jobs.errors import BackendError

if TYPE_CHECKING:  # the interface stays light: the CLI's run commands import it
    from jobs.materialize import MaterializedJob

# Run states shared by all backends (the kubernetes backend maps job conditions onto these).
PENDING = "pending"
QUEUED = "queued"
"""kubernetes: suspended but not cancelled — waiting for Kueue to admit it (or re-admit it
after a preemption), or paused by an admin. Not finished."""
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
RENDERED = "rendered"
UNKNOWN = "unknown"
STATES = (PENDING, QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, RENDERED, UNKNOWN)
FINISHED_STATES = (SUCCEEDED, FAILED, CANCELLED)


class NoLogs(BackendError):
    """Neither the run's pod nor an archived copy of its log exists."""


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    state: str
    """One of STATES."""
    backend: str
    sweep_id: str | None = None
    nodes: int = 1
    started_at: str | None = None
    """ISO-8601 UTC."""
    finished_at: str | None = None
    exit_code: int | None = None
    last_step: int | None = None
    last_loss: float | None = None
    retries: int = 0
    """Automatic resubmissions so far (kubernetes backend, `job.max_retries`)."""
    restarts: int | None = None
    """Times torchrun restarted the ranks in this attempt (`job.max_restarts`); None: not
    known here (a cluster pod's)."""
    message: str = ""
    run_dir: str | None = None
    """Where the run's checkpoints and logs/metrics.jsonl live (path or s3:// URI)."""
    log_ranks: int | None = None
    """How many ranks `logs --rank` can show (0..log_ranks-1): a local run's processes, a
    cluster run's pods; None: not known (a run recorded before it was)."""
    owner: str | None = None
    """Who launched it (`job.owner`, the `trainstack.io/owner` label); None: not recorded."""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


def matching(runs: list[RunStatus], sweep_id: str | None, state: str | None) -> list[RunStatus]:
    """The `list_runs` filters: None matches every run."""
    return [
        r
        for r in runs
        if (sweep_id is None or r.sweep_id == sweep_id) and (state is None or r.state == state)
    ]


@dataclass(frozen=True)
class DryRun:
    """What `schedule` would do. `request` is the backend's native form (argv + env, or
    manifest dicts); `text` is its exact printable form."""

    backend: str
    job: MaterializedJob
    request: Any
    text: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.text


class Backend(Protocol):
    name: str

    def dryrun(self, job: MaterializedJob) -> DryRun: ...

    def schedule(self, dryrun: DryRun) -> str: ...

    def status(self, run_id: str) -> RunStatus: ...

    def list_runs(
        self, sweep_id: str | None = None, state: str | None = None
    ) -> list[RunStatus]: ...

    def logs(self, run_id: str, rank: int = 0, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, run_id: str) -> None: ...
