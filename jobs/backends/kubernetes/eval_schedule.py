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

With no follower: the plan also rides on the run's job object (PLAN_ANNOTATION, written at
submit), so the Training API's scheduler (jobs/api/eval_scheduler.py), which runs in the
cluster with a Role that may create Jobs, makes the same passes for every such run whether or
not anyone follows it, and marks a run done (DONE_ANNOTATION) once none is left to submit.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from catalog.pods import Resources
from jobs.backends.kubernetes.client import state as k8s_state
from jobs.backends.kubernetes.client.api import ClusterError
from jobs.backends.kubernetes.client.batch import CREATED, list_jobs, progress, submit_job
from jobs.backends.kubernetes.client.ecr import resolve_digest
from jobs.backends.kubernetes.client.kinds import BY_KIND
from jobs.backends.kubernetes.eval_job import (
    EvalJobSpec,
    eval_selector,
    eval_template,
    job_name,
    to_manifests,
)
from jobs.backends.kubernetes.run_status import RUN_DIR_ANNOTATION
from jobs.backends.local.evals import unscored_steps
from jobs.runners.hf import Hf
from jobs.spec import LABEL_PREFIX, RUN_ID_LABEL
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
PLAN_ANNOTATION = f"{LABEL_PREFIX}/eval-plan"
"""The run's EvalPlan as JSON, on its job object (`plan_annotation`, `plan_of`)."""
DONE_ANNOTATION = f"{LABEL_PREFIX}/evals-submitted"
"""Set on the job object ("true") once its run ended and no eval Job is left to submit."""
PLAN_VERSION = 1
MAX_PLAN_BYTES = 16 * 1024
"""A plan is a few hundred bytes; one past this is not read (an annotation is input)."""


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


class PlanError(ValueError):
    """A job object's PLAN_ANNOTATION that cannot be read back: one line, that run alone."""


def plan_annotation(plan: EvalPlan) -> str:
    values = {"version": PLAN_VERSION, **asdict(plan)}
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def annotate(manifests: list[dict], plan: EvalPlan) -> None:
    """The plan on the run's job object (the manifest of a job kind), in place."""
    for manifest in manifests:
        if manifest.get("kind") in BY_KIND:
            annotations = manifest["metadata"].setdefault("annotations", {})
            annotations[PLAN_ANNOTATION] = plan_annotation(plan)


def plan_of(job: dict) -> EvalPlan | None:
    """The plan a job object carries (None: none, or its run was marked done). Its run id and
    namespace are the object's own, and its run dir must be the run's: a plan copied onto
    another run's object scores nothing of the first. Who can write the annotation can create
    the job object itself, which already runs pods with the plan's image and service account.
    Raises PlanError (one line) for one that does not read back."""
    metadata = job.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    text = annotations.get(PLAN_ANNOTATION)
    if text is None or annotations.get(DONE_ANNOTATION) == "true":
        return None
    run_id = (metadata.get("labels") or {}).get(RUN_ID_LABEL) or metadata.get("name", "?")
    if len(text) > MAX_PLAN_BYTES:
        raise PlanError(f"{run_id}: {PLAN_ANNOTATION}: over {MAX_PLAN_BYTES} bytes")
    try:
        values = json.loads(text)
        if values.pop("version") != PLAN_VERSION:
            raise ValueError("another version")
        spec = values["template"]
        template = EvalJobSpec(**{**spec, "resources": Resources(**spec["resources"])})
        plan = EvalPlan(template, int(values["max_concurrent"]), float(values["poll_s"]))
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise PlanError(f"{run_id}: {PLAN_ANNOTATION} does not read: {err}") from None
    if template.run_dir != annotations.get(RUN_DIR_ANNOTATION):
        raise PlanError(f"{run_id}: {PLAN_ANNOTATION}: its run dir is not the run's")
    return EvalPlan(
        replace(template, run_id=run_id, namespace=metadata.get("namespace", "")),
        plan.max_concurrent,
        plan.poll_s,
    )


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


ENDED = ("Failed", "Cancelled")
"""Job states (k8s_state.job_state) after which a run gets no more eval Jobs."""


class UnfollowedEvals:
    """The passes for runs nobody follows (the Training API's: jobs/api/eval_scheduler.py):
    `pass_over(jobs)` takes the namespace's trainstack job objects and makes a pass for each
    that carries a plan. A run queued or running gets the oldest unscored checkpoints' Jobs;
    one that succeeded gets the rest, then is marked done (DONE_ANNOTATION) and never read
    again; one that failed or was cancelled is marked done at once (cancel means cancel).
    Nothing of one run stops another's: a plan that does not read back, a run dir S3 refuses or
    a Job the cluster refuses is one line (once per run and problem), and the pass goes on."""

    def __init__(self, cluster: Any, prefix: str = "eval scheduler") -> None:
        self.cluster, self.prefix = cluster, prefix
        self._storages: dict[str, RunStorage] = {}
        self._said: dict[str, str] = {}
        """job uid -> the last problem said about it: said once, not every pass."""

    def pass_over(self, jobs: list[dict]) -> list[str]:
        lines: list[str] = []
        for job in jobs:
            lines += self._run(job["metadata"].get("uid", ""), job)
        uids = {job["metadata"].get("uid", "") for job in jobs}
        self._said = {uid: said for uid, said in self._said.items() if uid in uids}
        return lines

    def unlisted(self, err: Exception) -> list[str]:
        """The line for a pass whose listing failed (said once until a listing works)."""
        return self._once("", f"{self.prefix}: runs not listed this time: {err}")

    def _run(self, uid: str, job: dict) -> list[str]:
        try:
            plan = plan_of(job)
        except PlanError as err:
            return self._once(uid, f"{self.prefix}: {err}; its checkpoints get no eval Job")
        if plan is None:
            return []
        run_id, state = plan.template.run_id, k8s_state.job_state(job)
        if state in ENDED:
            return self._done(job, plan, f"{run_id} {state.lower()}: no more eval Jobs")
        try:
            done = schedule_pass(self.cluster, plan, self._storage(plan))
        except (ClusterError, StorageError) as err:
            line = f"{self.prefix}: {run_id}: eval Jobs not submitted this time: {err}"
            return self._once(uid, line)
        self._said.pop(uid, None)
        self._said.pop("", None)
        lines = [
            f"{self.prefix}: {run_id}: eval Job {job_name(run_id, step)} submitted (step "
            f"{step}; {done.unfinished} of at most {plan.max_concurrent} unfinished)"
            for step in done.submitted
        ]
        if state == "Succeeded" and not done.waiting:
            lines += self._done(job, plan, f"{run_id} succeeded: every checkpoint has its eval Job")
        return lines

    def _storage(self, plan: EvalPlan) -> RunStorage:
        run_dir = plan.template.run_dir
        if run_dir not in self._storages:
            self._storages[run_dir] = open_run_storage(run_dir)
        return self._storages[run_dir]

    def _done(self, job: dict, plan: EvalPlan, line: str) -> list[str]:
        """Mark the run done on its job object: no pass reads its plan again."""
        patch = {"metadata": {"annotations": {DONE_ANNOTATION: "true"}}}
        try:
            self.cluster.patch_job(job["metadata"]["name"], patch, BY_KIND[job["kind"]])
        except ClusterError as err:
            uid = job["metadata"].get("uid", "")
            return self._once(uid, f"{self.prefix}: {plan.template.run_id}: not marked done: {err}")
        self._storages.pop(plan.template.run_dir, None)
        return [f"{self.prefix}: {line}"]

    def _once(self, uid: str, line: str) -> list[str]:
        if self._said.get(uid) == line:
            return []
        self._said[uid] = line
        return [line]
