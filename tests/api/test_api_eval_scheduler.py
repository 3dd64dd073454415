"""Issue 45, eval while training with nobody following: a run submitted through the Training API
with `eval.every_checkpoint=true` carries its eval plan on its job object, and the service's
scheduler (jobs/api/eval_scheduler.py) submits one eval Job per committed checkpoint, at most
`eval.max_concurrent` unfinished, never one twice (a second scheduler, as after a restart, finds
the first's Jobs), marks the run done once it succeeded and every checkpoint has its Job, and
submits nothing for a failed run. A plan that does not read back is one line, once, and every
other run still gets its Jobs. The service is the one the stack deploys (infra's arguments)
against the fake apiserver; the real RBAC is tests/e2e/test_e2e_eval.py's."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jobs.api.eval_scheduler import EvalScheduler
from jobs.backends.kubernetes.eval_job import job_name
from jobs.backends.kubernetes.eval_schedule import (
    DONE_ANNOTATION,
    MAX_PLAN_BYTES,
    PLAN_ANNOTATION,
    PlanError,
    plan_of,
)
from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import NAMESPACE

EVERY = ["eval.every_checkpoint=true", "eval.tasks=[arc_easy]"]


def commit(run_dir: Path, step: int) -> None:
    marker = run_dir / "checkpoints" / f"step-{step:08d}" / "COMMITTED"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")


def eval_jobs(apiserver) -> set[str]:
    return {j["metadata"]["name"] for j in apiserver.list("jobs", NAMESPACE)}


def finish(apiserver, name: str) -> None:
    def mutate(job: dict) -> None:
        job["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}

    apiserver.update("jobs", name, NAMESPACE, mutate)


def job_object(apiserver, run_id: str) -> dict:
    (job,) = [j for j in apiserver.list("pytorchjobs") if j["metadata"]["name"] == run_id]
    return job


def wait_for(apiserver, run_id: str, condition: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conditions = (job_object(apiserver, run_id).get("status") or {}).get("conditions") or []
        if any(c["type"] == condition and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.02)
    raise AssertionError(f"{run_id} never {condition}")


def submit(api, run_id: str, *overrides: str) -> None:
    answer = api.client.post("/v1/runs", json=api.run_request(run_id, overrides=[*overrides]))
    assert answer.status_code == 201, answer.text


def scheduler(api, lines: list[str]) -> EvalScheduler:
    return EvalScheduler(api.service.backend, 0.01, lines.append)


def test_a_running_run_gets_n_at_a_time_and_a_restart_submits_none_twice(api, apiserver, tmp_path):
    apiserver.operator.plans["ev"] = [JobPlan(hold=True)]
    submit(api, "ev", *EVERY, "eval.max_concurrent=2")
    plan = plan_of(job_object(apiserver, "ev"))
    assert plan is not None and plan.max_concurrent == 2 and plan.template.run_id == "ev"
    run_dir = tmp_path / "runs" / "ev"
    for step in (2, 4, 6):
        commit(run_dir, step)
    lines: list[str] = []
    first = scheduler(api, lines)
    lines += first.pass_once()
    assert eval_jobs(apiserver) == {job_name("ev", 2), job_name("ev", 4)}
    assert sum("submitted" in line for line in lines) == 2, lines
    # The service restarted: a new scheduler, nothing twice, nothing over the limit.
    again = scheduler(api, lines)
    assert again.pass_once() == []
    finish(apiserver, job_name("ev", 2))
    assert len(again.pass_once()) == 1
    assert eval_jobs(apiserver) == {job_name("ev", s) for s in (2, 4, 6)}
    assert DONE_ANNOTATION not in job_object(apiserver, "ev")["metadata"]["annotations"]


def test_a_succeeded_run_gets_the_rest_then_is_done(api, apiserver, tmp_path):
    apiserver.operator.plans["ok"] = [JobPlan(steps=2, step_seconds=0.01)]
    submit(api, "ok", *EVERY)
    wait_for(apiserver, "ok", "Succeeded")
    for step in (1, 2):
        commit(tmp_path / "runs" / "ok", step)
    lines: list[str] = []
    passes = scheduler(api, lines)
    lines += passes.pass_once()
    assert eval_jobs(apiserver) == {job_name("ok", 1)}  # max_concurrent 1
    finish(apiserver, job_name("ok", 1))
    lines += passes.pass_once()
    assert eval_jobs(apiserver) == {job_name("ok", 1), job_name("ok", 2)}
    assert lines[-1].endswith("ok succeeded: every checkpoint has its eval Job"), lines
    assert job_object(apiserver, "ok")["metadata"]["annotations"][DONE_ANNOTATION] == "true"
    commit(tmp_path / "runs" / "ok", 3)  # after done: never read again
    assert passes.pass_once() == [] and len(eval_jobs(apiserver)) == 2


def test_a_failed_run_gets_none_and_a_bad_plan_stops_no_other_run(api, apiserver, tmp_path):
    apiserver.operator.plans["bad"] = [JobPlan(hold=True)]
    apiserver.operator.plans["good"] = [JobPlan(hold=True)]
    apiserver.operator.plans["lost"] = [JobPlan(steps=1, step_seconds=0.01, outcome="Failed")]
    for run_id in ("bad", "good", "lost"):
        submit(api, run_id, *EVERY, "job.max_retries=0")
        commit(tmp_path / "runs" / run_id, 5)
    wait_for(apiserver, "lost", "Failed")

    def garble(job: dict) -> None:
        job["metadata"]["annotations"][PLAN_ANNOTATION] = "{not json"

    apiserver.update("pytorchjobs", "bad", NAMESPACE, garble)
    lines: list[str] = []
    passes = scheduler(api, lines)
    lines += passes.pass_once()
    assert eval_jobs(apiserver) == {job_name("good", 5)}
    (said,) = [line for line in lines if "bad" in line]
    assert f"bad: {PLAN_ANNOTATION} does not read" in said
    assert any(line.endswith("lost failed: no more eval Jobs") for line in lines), lines
    assert passes.pass_once() == []  # said once, not every pass


def test_the_scheduler_thread_passes_until_stopped(api, apiserver, tmp_path):
    apiserver.operator.plans["th"] = [JobPlan(hold=True)]
    submit(api, "th", *EVERY)
    commit(tmp_path / "runs" / "th", 7)
    lines: list[str] = []
    thread = scheduler(api, lines)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        thread.stop()
    assert eval_jobs(apiserver) == {job_name("th", 7)}, lines


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["eval.include_path=/etc"], "eval.include_path"),
        (["eval.max_concurrent=17"], "eval.max_concurrent"),
        (["eval.limit=-1"], "eval.limit"),
        (["eval.every_checkpoint=false"], "eval.tasks"),  # a key it would not read
    ],
)
def test_bad_eval_keys_are_one_line_and_submit_nothing(api, apiserver, overrides, key):
    body = api.run_request("refused", overrides=[*EVERY, *overrides])
    answer = api.client.post("/v1/runs", json=body)
    assert answer.status_code in (400, 422), answer.text
    detail = answer.json()["detail"]
    assert key in detail and "\n" not in detail, detail
    assert apiserver.list("pytorchjobs") == [] and eval_jobs(apiserver) == set()


def _annotated(plan_text: str, run_dir: str = "s3://b/runs/x") -> dict:
    return {
        "kind": "PyTorchJob",
        "metadata": {
            "name": "x",
            "namespace": NAMESPACE,
            "labels": {"trainstack.io/run-id": "x"},
            "annotations": {PLAN_ANNOTATION: plan_text, "trainstack.io/run-dir": run_dir},
        },
    }


def test_a_plan_is_read_back_only_whole_and_for_its_own_run(api, apiserver):
    apiserver.operator.plans["src"] = [JobPlan(hold=True)]
    submit(api, "src", *EVERY)
    source = job_object(apiserver, "src")
    text = source["metadata"]["annotations"][PLAN_ANNOTATION]
    run_dir = source["metadata"]["annotations"]["trainstack.io/run-dir"]
    # Copied onto another run's object: that run's dir is not the plan's.
    with pytest.raises(PlanError, match="its run dir is not the run's"):
        plan_of(_annotated(text))
    # The object's own run id and namespace win over the plan's.
    copied = _annotated(text, run_dir)
    copied["metadata"]["namespace"] = "elsewhere"
    plan = plan_of(copied)
    assert plan is not None
    assert plan.template.run_id == "x" and plan.template.namespace == "elsewhere"
    values = json.loads(text)
    for bad in (
        "{not json",
        json.dumps({**values, "version": 2}),
        json.dumps({**values, "template": {**values["template"], "resources": 1}}),
        json.dumps({k: v for k, v in values.items() if k != "max_concurrent"}),
        " " * (MAX_PLAN_BYTES + 1),
    ):
        with pytest.raises(PlanError):
            plan_of(_annotated(bad, run_dir))
