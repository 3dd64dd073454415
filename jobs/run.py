"""Hand one materialized job to its backend, print the plan, follow it when it runs here."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobs.backend_registry import traits_of
from jobs.backends.base import SUCCEEDED, BackendError

if TYPE_CHECKING:
    from jobs.backends.base import Backend
    from jobs.materialize import MaterializedJob


@dataclass
class Warned:
    """The plan warnings one launch's one-line points have printed, so that a sweep says each
    once, not once per point (points may run in threads). Owned by the launch (jobs.app
    LaunchTask), so the next launch in the same process says them again."""

    seen: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def first(self, warning: str) -> bool:
        """True the first time this launch meets `warning`."""
        with self.lock:
            new = warning not in self.seen
            self.seen.add(warning)
        return new


def follows(job: MaterializedJob) -> bool:
    """Local runs stream their progress; cluster runs only with --wait."""
    return not traits_of(job.cfg.backend.name).pods or bool(job.cfg.backend.wait)


def _exists(backend: Backend, run_id: str) -> bool:
    try:
        backend.status(run_id)
    except BackendError:
        return False
    return True


def run_job(
    backend: Backend,
    job: MaterializedJob,
    *,
    dryrun: bool = False,
    brief: bool = False,
    warned: Warned | None = None,
) -> int:
    """Exit code: 0 when scheduled (or succeeded, when followed), else the run's exit code.
    `brief`: one line per job (sweep points that are not followed), its plan's warnings only
    where the launch's `warned` has not met them yet (without one, all of them)."""
    if brief and not dryrun and not follows(job):
        dry = backend.dryrun(job)
        backend.schedule(dry)
        print(f"{job.plan.one_line()} -> {dry.extra.get('path', backend.name)}", flush=True)
        warned = warned or Warned()
        for warning in job.plan.warnings:  # once per sweep, not once per point
            if warned.first(warning):
                print(f"warning  {warning}", flush=True)
        return 0
    print(job.plan, flush=True)
    request = backend.dryrun(job)
    if dryrun:
        print(f"--- dry run ({backend.name}): nothing written or started ---")
        print(request, end="" if str(request).endswith("\n") else "\n")
        return 0
    if _exists(backend, job.run_id):
        print(f"run {job.run_id} exists: resuming from its latest checkpoint", flush=True)
    run_id = backend.schedule(request)
    if not traits_of(backend.name).submits:  # written, not run: nothing is scheduled anywhere
        print(f"rendered to {request.extra['path']}")
        return 0
    if "path" in request.extra:
        print(f"wrote {request.extra['path']}")
    if not follows(job):
        print(f"scheduled {run_id} on {backend.name}")
        return 0
    try:
        for line in backend.logs(run_id, follow=True):
            print(line, flush=True)
    except KeyboardInterrupt:
        print(f"\ncancelling {run_id} (the trainer checkpoints first) ...", file=sys.stderr)
        backend.cancel(run_id)
        for line in backend.logs(run_id, follow=True):
            print(line, flush=True)
    status = backend.status(run_id)
    print(f"{run_id}: {status.state}" + (f" ({status.message})" if status.message else ""))
    if status.state == SUCCEEDED:
        return 0
    return status.exit_code or 1
