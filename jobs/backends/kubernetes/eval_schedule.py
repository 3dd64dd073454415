"""`eval.every_checkpoint=true` on backend=kubernetes: one eval Job (eval_job.py) per committed
checkpoint, at most `eval.max_concurrent` of the run's at a time, submitted by whoever follows
the run it launched (`launch --wait`: KubernetesBackend.wait).

Why the follower: no trainstack process runs on the cluster with the right to create Jobs
(the trainer's pods have no Kubernetes token, by design), and a hook in the trainer would hold
the training job's GPUs while lm-eval runs. So the follower that already polls the run polls
its run dir too: each pass lists the committed checkpoints without results and the run's eval
Jobs, and submits the oldest unsubmitted ones while fewer than `max_concurrent` of the run's
eval Jobs are unfinished (queued by Kueue or running). After the run succeeded it keeps
passing until every checkpoint has its Job (not until they finish: Kueue and the Job
controller run them without it). The limit of this form: a checkpoint that lands while
nobody follows has no Job until a follower passes again; `trainstack eval RUN --step N
backend=kubernetes` submits the same Job by hand.

Idempotent: the Job of a run and step always has the same name (eval_job.job_name), so a
second follower, a restart of this one or a pass racing another finds the first Job
(AlreadyExists) and never scores a checkpoint twice; a checkpoint that already has results
(`trainstack eval` scored it) gets none.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jobs.backends.kubernetes.client.api import ClusterError
from jobs.backends.kubernetes.client.batch import CREATED, list_jobs, progress, submit_job
from jobs.backends.kubernetes.client.ecr import resolve_digest
from jobs.backends.kubernetes.eval_job import (
    EvalJobSpec,
    eval_selector,
    eval_template,
    job_name,
    to_manifests,
)
from jobs.backends.local.evals import unscored_steps
from jobs.runners.hf import Hf
from jobs.submission import git_sha
from jobs.validate_eval import eval_settings
from trainer.errors import ConfigError
from trainer.storage import RunStorage, StorageError, open_run_storage

EVAL_IMAGE_VARIANT = Hf.image_variant
"""The trainer image's variant eval pods run: the `hf-` one carries transformers and
accelerate, which lm-eval's `hf` model needs (lm-eval itself: see the README's eval part)."""
FINAL = ("Succeeded", "Failed")
MAX_FAILED_PASSES = 20
"""After the run, passes that fail in a row before the follower gives up (one line saying so)."""


def eval_image(cfg: Any) -> str:
    """`job.image` as given, else the `hf-` variant of this commit's trainer image."""
    if cfg.job.image:
        return str(cfg.job.image)
    if cfg.job.image_repository:
        return f"{cfg.job.image_repository}:{EVAL_IMAGE_VARIANT}{git_sha()}"
    raise ConfigError(
        "job.image: the eval pod needs the trainer image's hf- variant; set job.image or "
        "select a stack (job.image_repository)"
    )


@dataclass(frozen=True)
class EvalPlan:
    """How a followed run's checkpoints are evaluated."""

    template: EvalJobSpec
    """Its eval Job; `.at(step)` for each checkpoint."""
    max_concurrent: int
    poll_s: float


def plan_for(cfg: Any, run_id: str, run_dir: str, pin: bool = True) -> EvalPlan | None:
    """The run's plan (None without `eval.every_checkpoint`), its image pinned to a digest."""
    settings = eval_settings(cfg)
    if settings is None:
        return None
    image = eval_image(cfg)
    template = eval_template(
        cfg, run_id, run_dir, settings, resolve_digest(image) if pin else image
    )
    return EvalPlan(template, int(cfg.eval.max_concurrent), float(cfg.backend.poll_interval_s))


@dataclass
class EvalPass:
    submitted: list[int] = field(default_factory=list)
    """Steps whose Job this pass created."""
    unfinished: int = 0
    """The run's eval Jobs queued or running after the pass."""
    waiting: list[int] = field(default_factory=list)
    """Unscored checkpoints still without a Job (over the limit)."""


def schedule_pass(cluster: Any, plan: EvalPlan, storage: RunStorage) -> EvalPass:
    """Submit the oldest checkpoints without results and without a Job, while fewer than
    `plan.max_concurrent` of the run's eval Jobs are unfinished."""
    run_id = plan.template.run_id
    jobs = list_jobs(cluster, eval_selector(run_id))
    names = {job["metadata"]["name"] for job in jobs}
    outcome = EvalPass(unfinished=sum(progress(job).state not in FINAL for job in jobs))
    todo = [step for step in unscored_steps(storage) if job_name(run_id, step) not in names]
    for index, step in enumerate(todo):
        if outcome.unfinished >= plan.max_concurrent:
            outcome.waiting = todo[index:]
            break
        created, _ = submit_job(cluster, to_manifests(plan.template.at(step))[0])
        outcome.unfinished += 1  # ours, or one another follower just created: it counts
        if created == CREATED:
            outcome.submitted.append(step)
    return outcome


def _pass(cluster: Any, plan: EvalPlan, storage: RunStorage) -> tuple[EvalPass, list[str]]:
    """One pass and its lines; a failure is a line, never the follow's end."""
    run_id = plan.template.run_id
    try:
        done = schedule_pass(cluster, plan, storage)
    except (ClusterError, StorageError) as exc:
        line = f"[trainstack] {run_id}: eval jobs not submitted this time: {exc}"
        return EvalPass(waiting=[-1]), [line]  # unknown: try again
    lines = [
        f"[trainstack] {run_id}: eval job {job_name(run_id, step)} submitted "
        f"(step {step}; {done.unfinished} of at most {plan.max_concurrent} unfinished)"
        for step in done.submitted
    ]
    return done, lines


def follow_evals(
    cluster: Any, plan: EvalPlan, on_line: Callable[[str], object], stop: threading.Event
) -> None:
    """A pass every `plan.poll_s` until `stop` is set (the run ended)."""
    storage = open_run_storage(plan.template.run_dir)
    while True:
        for line in _pass(cluster, plan, storage)[1]:
            on_line(line)
        if stop.wait(plan.poll_s):
            return


def finish_evals(
    cluster: Any, plan: EvalPlan, sleep: Callable[[float], object] = time.sleep
) -> Iterator[str]:
    """After the run: passes until every unscored checkpoint has its Job (or
    MAX_FAILED_PASSES failed in a row); their lines."""
    storage = open_run_storage(plan.template.run_dir)
    failed = 0
    while True:
        done, lines = _pass(cluster, plan, storage)
        yield from lines
        if not done.waiting:
            return
        failed = failed + 1 if done.waiting == [-1] else 0
        if failed >= MAX_FAILED_PASSES:
            yield (
                f"[trainstack] {plan.template.run_id}: gave up submitting eval jobs after "
                f"{failed} failed tries; `trainstack eval RUN --step N backend=kubernetes` "
                "submits one"
            )
            return
        sleep(plan.poll_s)


class EvalFollow:
    """The passes while a run is followed, in a thread: their lines go to `on_line` as they
    come, or (without one) wait in `pending()` for a follower that yields lines."""

    def __init__(
        self, cluster: Any, plan: EvalPlan, on_line: Callable[[str], object] | None = None
    ) -> None:
        self.cluster, self.plan = cluster, plan
        self._lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=follow_evals,
            args=(cluster, plan, on_line or self._lines.put, self._stop),
            daemon=True,
        )
        self._thread.start()

    def pending(self) -> Iterator[str]:
        while True:
            try:
                yield self._lines.get_nowait()
            except queue.Empty:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def end(self, succeeded: bool) -> Iterator[str]:
        """The run ended: the rest submitted once it succeeded, none after anything else."""
        self.stop()
        yield from self.pending()
        if succeeded:
            yield from finish_evals(self.cluster, self.plan)
        else:
            yield f"[trainstack] {self.plan.template.run_id}: no more eval jobs submitted"
