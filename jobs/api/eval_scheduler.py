"""The Training API's eval scheduler: `eval.every_checkpoint=true` on the cluster with nobody
following the run. The service runs in the cluster with a Role that may create batch Jobs (the
trainer's pods have no Kubernetes token), so it makes the passes `launch --wait` makes
(jobs/backends/kubernetes/eval_schedule.py: UnfollowedEvals) for every run whose job object
carries an eval plan (written at submit): its own runs, and a `launch --wait` run's too, whose
passes and these find each other's Jobs by name, never a twin. A restart of the service loses
nothing: the plans are on the cluster, and a checkpoint that landed meanwhile gets its Job on
the first pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from jobs.backends.kubernetes.backend import ClusterError
from jobs.backends.kubernetes.eval_schedule import UnfollowedEvals
from jobs.backends.kubernetes.run_status import MANAGED_SELECTOR


class EvalScheduler:
    """A pass every `poll_s` in a daemon thread between `start()` and `stop()`, over the
    namespace's trainstack jobs as `backend` lists them (one list per kind and pass); each
    line (a Job submitted, a run marked done, a problem) goes to `on_line`."""

    def __init__(self, backend: Any, poll_s: float, on_line: Callable[[str], object]) -> None:
        self.backend, self.poll_s, self.on_line = backend, poll_s, on_line
        self.passes = UnfollowedEvals(backend.cluster)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="eval scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                lines = self.pass_once()
            except Exception as err:  # a thread that died would schedule nothing for anyone
                lines = [f"eval scheduler: the pass failed: {err!r}"]
            for line in lines:
                self.on_line(line)
            self._stop.wait(self.poll_s)

    def pass_once(self) -> list[str]:
        try:
            jobs = self.backend.job_objects(MANAGED_SELECTOR)
        except ClusterError as err:
            return self.passes.unlisted(err)
        return self.passes.pass_over(jobs)
