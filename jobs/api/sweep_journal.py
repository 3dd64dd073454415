"""What a killed service leaves half done, and how the next one finishes it.

A sweep is all or nothing (jobs/api/service.py `submit_sweep`); the rollback of one that fails
partway runs in the request. A service killed between two points never runs it, so before the
first point is submitted the service writes a journal: a ConfigMap naming the runs the sweep is
about to create, deleted once the sweep is whole (or rolled back). A journal found when a
service starts belongs to a sweep cut short: its runs are withdrawn (only jobs of that sweep and
owner created since the journal) and the journal is deleted, so the sweep is as if never sent;
its client, which got no answer, posts it again.

A run's submission creates its ConfigMap (and NetworkPolicy) before its job
(jobs/backends/kubernetes/client/submit.py); a kill in between leaves them without a job, and
one after the job's creation leaves them without their owner reference (so deleting the job
would not delete them). On start the service deletes the first (no run has them) and gives the
second their owner.

Replicas: a leftover names no process and a journal only its host, so one another replica may
still be writing is left alone until it is `stale_s` old; a journal this host wrote (the
service's pod restarted after a kill: same host name) is recovered at once.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from jobs.backends.base import BackendError
from jobs.backends.kubernetes.backend import KubernetesBackend
from jobs.backends.kubernetes.faults import RECOVER_AFTER_ENV
from jobs.backends.kubernetes.journals import (
    Found,
    delete_journal,
    found,
    tidy_submission,
    write_journal,
)
from jobs.backends.kubernetes.run_status import SWEEP_LABEL
from jobs.spec import OWNER_LABEL

STALE_S = 600.0
"""How old another replica's journal or leftover must be to be taken for a crash's: far longer
than the longest sweep takes to submit (64 points: about half a minute)."""


def _stale_s() -> float:
    raw = os.environ.get(RECOVER_AFTER_ENV, "")
    try:
        return float(raw) if raw else STALE_S
    except ValueError:
        return STALE_S


class NotRecorded(Exception):
    """A whole sweep whose journal could not be deleted (so a restart would roll it back):
    rolled back now; str() is the answer's one line."""


@dataclass
class SweepJournal:
    backend: KubernetesBackend
    host: str = field(default_factory=socket.gethostname)
    stale_s: float = field(default_factory=_stale_s)

    def begin(self, sweep_id: str, owner: str, run_ids: list[str]) -> str:
        """Write the journal of a sweep about to create `run_ids`; returns its name."""
        data = {"sweep_id": sweep_id, "owner": owner, "host": self.host}
        return write_journal(self.backend.cluster, {**data, "runs": json.dumps(run_ids)})

    def run(
        self,
        sweep_id: str,
        owner: str,
        run_ids: list[str],
        submit: Callable[[], None],
        roll_back: Callable[[], object],
    ) -> None:
        """`submit()` the sweep's points under its journal (none when it creates no run). A
        failed point's rollback happens in `submit`; the journal goes either way. One that
        cannot go after a whole sweep is `NotRecorded`, the sweep rolled back first."""
        name = self.begin(sweep_id, owner, run_ids) if run_ids else None  # nothing sent yet
        ended = True
        try:
            submit()
        finally:
            if name is not None:
                try:
                    self.end(name)
                except BackendError:
                    ended = False
        if not ended:
            roll_back()
            raise NotRecorded(
                f"sweep {sweep_id}: submitted, but its completion could not be recorded on the "
                "cluster, so it was rolled back; post it again"
            )

    def end(self, name: str) -> None:
        delete_journal(self.backend.cluster, name)

    def recover(self) -> list[str]:
        """Roll back every sweep a killed service left half submitted, and tidy runs it left
        half submitted; one line per thing done."""
        now = datetime.now(UTC)
        done = []
        leftovers = found(self.backend.cluster)
        for item in leftovers:
            if item.journal and (item.data.get("host") == self.host or self._old(item, now)):
                done.append(self._roll_back(item))
        for item in leftovers:
            if item.run_id is not None and not item.journal:
                line = self._tidy(item.run_id, item, now)
                if line:
                    done.append(line)
        return done

    def _old(self, item: Found, now: datetime) -> bool:
        return item.created is None or (now - item.created).total_seconds() >= self.stale_s

    def _roll_back(self, item: Found) -> str:
        sweep_id, owner = item.data.get("sweep_id", ""), item.data.get("owner", "")
        since = item.created.replace(microsecond=0) if item.created else None
        labels = {OWNER_LABEL: owner, SWEEP_LABEL: sweep_id}
        removed, left = [], []
        for run_id in json.loads(item.data.get("runs", "[]")):
            job = self.backend.find(run_id)
            if job is None:
                continue
            created = _timestamp(job["metadata"].get("creationTimestamp"))
            if since is not None and created is not None and created < since:
                left.append(run_id)  # older than the sweep: not its to delete
                continue
            if self.backend.withdraw(run_id, job["metadata"].get("uid"), labels):
                left.append(run_id)
            else:
                removed.append(run_id)
        self.end(item.name)
        kept = f"; left in place: {', '.join(left)}" if left else ""
        return (
            f"sweep {sweep_id} was cut short by a restart: rolled back "
            f"{len(removed)} run(s) it had submitted{kept}"
        )

    def _tidy(self, run_id: str, item: Found, now: datetime) -> str | None:
        """A run's ConfigMap without an owner: a submission cut short."""
        job = self.backend.find(run_id)
        if job is None and not self._old(item, now):
            return None  # maybe another replica's submission, still going
        tidy_submission(self.backend.cluster, run_id, job)
        if job is not None:
            return f"run {run_id}: its ConfigMap and NetworkPolicy given to its job"
        return f"run {run_id}: a submission cut short before its job; its ConfigMap removed"


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def recover(backend: KubernetesBackend) -> list[str]:
    """`SweepJournal.recover` for the service's start: the lines, or one saying why not."""
    try:
        return SweepJournal(backend).recover()
    except BackendError as err:
        return [f"recovery skipped: {err}"]
