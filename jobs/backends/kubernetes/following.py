"""Following a run on the cluster, and restarting it: auto-restart lives with whoever follows
a run it scheduled (`--wait`, the sweep launcher's wait mode, `logs --follow`). When the job
ends Failed and was not cancelled, the same run id is resubmitted up to `job.max_retries`
times with exponential backoff, and resumes from its checkpoint; nothing another submitted
(a job of the same name with another uid) is restarted."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

from jobs.backends.base import FAILED, RunStatus
from jobs.backends.kubernetes.client import state as k8s_state
from jobs.backends.kubernetes.client.kinds import JobKind
from jobs.backends.kubernetes.client.watch import Cancellation, follow_log, wait_for_end
from jobs.backends.kubernetes.run_status import deleted, to_status
from jobs.backends.kubernetes.submitting import Submissions, submit_stamped

MAX_BACKOFF_S = 900.0
"""The backoff before a resubmission doubles per retry up to this (15 min)."""
LOG_END_GRACE_S = 3.0
"""How long after the job's end the log's stream may stay open before it is reopened (and an
ended container's log read to its end): the kubelet ends the follow of an exited container,
kwok's kubelet API (sigs.k8s.io/kwok v0.8.0, pkg/kwok/server/debugging_logs.go: "streams the
logs until the connection is closed by the client") never does."""


def follow(
    cluster: Any,
    run_id: str,
    rank: int,
    kind: JobKind,
    outcome: list[RunStatus],
    cancel: Cancellation | None,
) -> Iterator[str]:
    """The rank's log lines interleaved with `[trainstack]` state changes, until the job
    ends; its final status is appended to `outcome`. Its two pumps stop when `cancel` is
    set or when the reader closes this generator."""

    own = cancel is None
    cancel = cancel or Cancellation()

    lines: queue.Queue = queue.Queue()
    done = object()

    log_ended = threading.Event()

    def pump_log() -> None:
        try:
            for line in follow_log(cluster, run_id, rank, kind=kind, cancel=cancel):
                lines.put(line)
        except Exception as exc:
            lines.put(exc)
        finally:
            log_ended.set()
        lines.put(done)

    def end_log() -> None:
        while not log_ended.wait(LOG_END_GRACE_S) and not cancel.is_set():
            cancel.interrupt()

    final_line: list[str] = []

    def report(state: str, _: dict) -> None:
        # The final state is shown after the log's last lines.
        line = f"[trainstack] {run_id}: {state}"
        (final_line.append if k8s_state.is_final(state) else lines.put)(line)

    def pump_states() -> None:
        try:
            job = wait_for_end(cluster, run_id, on_state=report, kind=kind, cancel=cancel)
            outcome.append(to_status(job) if job else deleted(run_id, kind))
            threading.Thread(target=end_log, daemon=True).start()
        except Exception as exc:
            lines.put(exc)
        lines.put(done)

    threads = [threading.Thread(target=f, daemon=True) for f in (pump_log, pump_states)]
    for thread in threads:
        thread.start()
    finished = 0
    try:
        while finished < len(threads):
            item = lines.get()
            if item is done:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        if own or finished < len(threads):
            cancel.set()  # failed or abandoned by its reader: neither pump goes on
    yield from final_line


def restart_due(submissions: Submissions, run_id: str, final: RunStatus) -> bool:
    """`final` failed, the run was submitted here and has retries left."""
    scheduled = submissions.scheduled.get(run_id)
    return final.state == FAILED and scheduled is not None and final.retries < scheduled[1]


def restart(
    cluster: Any,
    submissions: Submissions,
    run_id: str,
    kind: JobKind,
    retries_so_far: int,
    backoff_s: float,
) -> Generator[str, None, bool]:
    """Back off (`backoff_s`, doubled per retry so far), then resubmit unless the run was
    cancelled meanwhile. Yields progress lines; returns whether it resubmitted."""

    manifests, max_retries = submissions.scheduled[run_id]
    delay = min(backoff_s * 2**retries_so_far, MAX_BACKOFF_S)
    attempt = retries_so_far + 1
    yield f"[trainstack] {run_id}: Failed; restart {attempt}/{max_retries} in {delay:.0f}s"
    cluster.sleep(delay)
    job = cluster.get_job(run_id, kind)
    if job is not None and k8s_state.is_cancelled(job):
        yield f"[trainstack] {run_id}: cancelled meanwhile; not restarting"
        return False
    if job is None or job["metadata"]["uid"] != submissions.uids.get(run_id):
        yield f"[trainstack] {run_id}: replaced or deleted by someone else; not restarting"
        return False
    submission = submit_stamped(cluster, manifests, retries=attempt)
    submissions.uids[run_id] = submission.job["metadata"]["uid"]
    yield f"[trainstack] {run_id}: {submission.outcome} (retry {attempt}/{max_retries})"
    return True


def drain(lines: Generator[str, None, bool], on_line: Callable[[str], Any]) -> bool:
    """Send each line of `lines` to `on_line`; return the generator's result."""
    while True:
        try:
            on_line(next(lines))
        except StopIteration as done:
            return done.value
