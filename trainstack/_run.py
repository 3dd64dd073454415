"""The run handle: `Run`, `RunStatus` and `Sweep`, the same for every backend and for the
Training API. A handle holds a run id and the place that answers for it (`Place`: this
process, through the CLI's own functions, or a Training API over HTTP), nothing else: any
process re-attaches by id (`trainstack.run`)."""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from jobs.errors import ConfigError, RunFailed, WaitTimeout

SUCCEEDED = "succeeded"
FINISHED = ("succeeded", "failed", "cancelled")
"""States a run does not leave (jobs.backends.base.FINISHED_STATES, which imports heavier)."""
RENDERED = "rendered"
"""backend=render: written, never run; a wait returns at once."""
LOG_TAIL = 20
"""Lines of the log a RunFailed carries."""


@dataclass(frozen=True)
class RunStatus:
    """A run's state as `trainstack runs` and `trainstack status` print it."""

    run_id: str
    state: str
    """pending, queued, running, succeeded, failed, cancelled, rendered or unknown."""
    backend: str
    step: int | None = None
    """The last step in its metrics.jsonl."""
    loss: float | None = None
    retries: int = 0
    """Automatic resubmissions (kubernetes: job.max_retries)."""
    restarts: int | None = None
    """torchrun's restarts of the ranks in this attempt (None: not known here)."""
    exit_code: int | None = None
    reason: str = ""
    """Why it is in its state, as its backend says (the failure, Kueue's reason...)."""
    sweep_id: str | None = None
    started_at: str | None = None
    """ISO-8601 UTC."""
    finished_at: str | None = None
    run_dir: str | None = None
    owner: str | None = None
    log_ranks: int | None = None
    """How many ranks `logs(rank=...)` can show (None: not known)."""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def queued_reason(self) -> str | None:
        """Kueue's reason a queued run waits (its quota, its position), else None."""
        return (self.reason or None) if self.state == "queued" else None


class Place(Protocol):
    """Where runs live and who answers for them: this process or a Training API."""

    def submit(
        self, overrides: Sequence[str], values: Mapping[str, Any] | None, **options: Any
    ) -> Run: ...

    def status(self, run_id: str) -> RunStatus: ...

    def logs(self, run_id: str, rank: int, follow: bool) -> Iterator[str]: ...

    def metrics(self, run_id: str, run_dir: str | None) -> list[dict[str, Any]]: ...

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]: ...

    def export(self, run_id: str, to: str, **options: Any) -> Any: ...

    def cancel(self, run_id: str) -> None: ...

    def config(self, run_id: str) -> dict[str, Any] | None: ...


class Home(Place, Protocol):
    """A place that also launches sweeps and finds and lists runs (trainstack._here.Here)."""

    def submit_sweep(
        self,
        overrides: Sequence[str],
        values: Mapping[str, Any] | None,
        axes: Mapping[str, Sequence[Any]],
        sweep_id: str | None,
    ) -> Sweep: ...

    def find(self, run_id: str) -> Run: ...

    def listed(self, sweep: str | None, state: str | None) -> list[Run]: ...


@dataclass
class Run:
    """One run, wherever it runs. Every method asks its place afresh (nothing is cached but
    the config and, for a launch, its plan and request)."""

    id: str
    place: Place = field(repr=False)
    plan: dict[str, Any] | None = field(default=None, repr=False)
    """The launch's plan (nodes, GPUs, cost, warnings), when this handle launched it."""
    request: str | None = field(default=None, repr=False)
    """What was (or, for a dry run, would be) run or sent: the backend's exact text."""
    submitted: bool = True
    """False for a dry run: nothing was written or started."""
    _config: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def config(self) -> dict[str, Any] | None:
        """The run's recorded, composed config (None where no record is readable from
        here)."""
        if self._config is None:
            self._config = self.place.config(self.id)
        return self._config

    def status(self) -> RunStatus:
        return self.place.status(self.id)

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> RunStatus:
        """Until the run finishes: its status when it succeeded (or was only rendered);
        RunFailed (state, reason, exit code, log tail) when it failed or was cancelled;
        WaitTimeout (a TimeoutError) after `timeout` seconds, the run going on."""
        if timeout is not None and not (timeout >= 0 and math.isfinite(timeout)):
            raise ConfigError(f"timeout: {timeout!r}; allowed: seconds >= 0, or None")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.state == RENDERED or status.state == SUCCEEDED:
                return status
            if status.finished:
                raise RunFailed(
                    self.id, status.state, status.reason, status.exit_code, self._tail()
                )
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"run {self.id}: still {status.state} after {timeout} s")
            left = poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
            time.sleep(left)

    def _tail(self) -> tuple[str, ...]:
        try:
            return tuple(self.logs(tail=LOG_TAIL))
        except Exception:  # the log is decoration on the failure: it may be gone
            return ()

    def logs(self, rank: int = 0, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The rank's log lines; `follow` streams until the run ends (waiting for its
        process or pod to start); `tail`: only the last N lines (not with follow)."""
        if tail is not None and (follow or tail < 0):
            raise ConfigError(f"tail: {tail!r}; allowed: a count >= 0, without follow")
        lines = self.place.logs(self.id, rank, follow)
        if tail is None:
            return lines
        return iter(collections.deque(lines, maxlen=tail))

    def metrics(self) -> list[dict[str, Any]]:
        """The metrics.jsonl records that have a step (what `trainstack plot` reads),
        bounded as the Training API bounds them."""
        return self.place.metrics(self.id, self.status().run_dir)

    def metrics_frame(self) -> Any:
        """`metrics()` as a pandas DataFrame (pandas must be installed)."""
        import pandas  # lazy: an optional dependency, for this method alone

        return pandas.DataFrame.from_records(self.metrics())

    def checkpoints(self) -> list[dict[str, Any]]:
        """What `trainstack checkpoints` lists: step, committed, size, complete/problem."""
        return self.place.checkpoints(self.id)

    def export(
        self,
        to: str,
        step: int | None = None,
        dtype: Literal["bf16", "fp32"] = "bf16",
        merge: bool = False,
    ) -> Any:
        """A committed checkpoint as a Hugging Face directory (`trainstack export`)."""
        return self.place.export(self.id, to, step=step, dtype=dtype, merge=merge)

    def cancel(self) -> None:
        """Stop it (idempotent: a finished run is left alone); the trainer checkpoints."""
        self.place.cancel(self.id)

    def relaunch(self, *overrides: str, **flags: Any) -> Run:
        """Resume this run with its own recorded config, changing only what a relaunch may
        (steps, intervals, loggers, how the job runs: jobs/relaunch.py MUTABLE_KEYS);
        anything else is ConfigError naming the key."""
        return self.place.submit([f"run_id={self.id}", *overrides], None, **flags)


@dataclass
class Sweep:
    """The runs of one sweep, one per grid point."""

    id: str
    runs: list[Run]
    points: list[dict[str, Any]] = field(default_factory=list)
    """Each point's swept values, beside `runs`."""

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> list[RunStatus]:
        """Every point to its end; RunFailed for the first that failed (the others are
        still waited for first), WaitTimeout past `timeout` for the whole sweep."""
        deadline = None if timeout is None else time.monotonic() + timeout
        done: list[RunStatus] = []
        failed: RunFailed | None = None
        for run in self.runs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                done.append(run.wait(left, poll))
            except RunFailed as err:
                failed = failed or err
                done.append(run.status())
        if failed is not None:
            raise failed
        return done

    def table(self) -> list[dict[str, Any]]:
        """Each point's values beside its run's state and final step and loss."""
        rows = []
        for run, point in zip(self.runs, self.points or [{}] * len(self.runs), strict=True):
            status = run.status()
            rows.append(
                {
                    "run_id": run.id,
                    **point,
                    "state": status.state,
                    "step": status.step,
                    "loss": status.loss,
                }
            )
        return rows

    def best(self, metric: str = "loss", mode: Literal["min", "max"] = "min") -> Run:
        """The run whose last record of `metric` is lowest (`mode="min"`) or highest."""
        if mode not in ("min", "max"):
            raise ConfigError(f"mode: {mode!r}; allowed: min, max")
        scored = []
        for run in self.runs:
            values = [r[metric] for r in run.metrics() if isinstance(r.get(metric), int | float)]
            if values:
                scored.append((values[-1], run))
        if not scored:
            raise ConfigError(f"metric: no run of sweep {self.id} has recorded {metric!r}")
        pick = min if mode == "min" else max
        return pick(scored, key=lambda item: item[0])[1]

    def cancel(self) -> None:
        for run in self.runs:
            run.cancel()
