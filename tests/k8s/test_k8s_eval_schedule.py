"""Issue 45, eval while training on the cluster: `eval.every_checkpoint=true` with `launch
--wait` submits one eval Job per committed checkpoint, at most `eval.max_concurrent` of the
run's unfinished at once, never one checkpoint twice (a deterministic name: a second
follower's pass finds the first Job), none for a checkpoint already scored; through the real
client against the fake apiserver, whose Job controller is stood in for by a thread that
finishes each eval Job a little after it lands."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from jobs.backends.kubernetes import eval_schedule
from jobs.backends.kubernetes.eval_job import eval_template, job_name
from jobs.backends.kubernetes.eval_schedule import EvalPlan, schedule_pass
from jobs.compose import compose
from testing_support.k8s.cluster import NAMESPACE
from testing_support.k8s.fake_operator import JobPlan
from trainer.evaluation.config import EvalConfig
from trainer.storage import open_run_storage

IMAGE = "registry.example.com/trainer:v1"


def commit(run_dir: Path, step: int) -> None:
    marker = run_dir / "checkpoints" / f"step-{step:08d}" / "COMMITTED"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")


def plan(run_dir: Path, limit: int) -> EvalPlan:
    cfg = compose(["backend=kubernetes", "compute=p4d.24xlarge", f"job.image={IMAGE}"])
    settings = EvalConfig(tasks=["arc_easy"])
    template = eval_template(cfg, run_dir.name, str(run_dir), settings, IMAGE)
    return EvalPlan(template, limit, poll_s=0.02)


def finish(apiserver, name: str, condition: str = "Complete") -> None:
    def mutate(job: dict) -> None:
        job["status"] = {"conditions": [{"type": condition, "status": "True"}], "succeeded": 1}

    apiserver.update("jobs", name, NAMESPACE, mutate)


def names(apiserver) -> set[str]:
    return {j["metadata"]["name"] for j in apiserver.list("jobs", NAMESPACE)}


def test_n_at_a_time_oldest_first_and_never_twice(apiserver, cluster, tmp_path):
    run_dir = tmp_path / "r1"
    for step in (10, 20, 30, 40, 50):
        commit(run_dir, step)
    scored = run_dir / "eval" / "step-00000010" / "results.json"  # `trainstack eval` did it
    scored.parent.mkdir(parents=True)
    scored.write_text("{}")
    evals, storage = plan(run_dir, limit=2), open_run_storage(str(run_dir))

    first = schedule_pass(cluster, evals, storage)
    assert first.submitted == [20, 30] and first.waiting == [40, 50] and first.unfinished == 2
    assert names(apiserver) == {"r1-eval-20", "r1-eval-30"}
    # Nothing finished: nothing more, and nothing twice.
    again = schedule_pass(cluster, evals, storage)
    assert again.submitted == [] and again.unfinished == 2 and again.waiting == [40, 50]
    finish(apiserver, "r1-eval-20")
    third = schedule_pass(cluster, evals, storage)
    assert third.submitted == [40] and third.waiting == [50]
    # A failed eval Job is not retried by the follower: its checkpoint had its one Job.
    finish(apiserver, "r1-eval-30", "Failed")
    finish(apiserver, "r1-eval-40")
    commit(run_dir, 60)
    fourth = schedule_pass(cluster, evals, storage)
    assert fourth.submitted == [50, 60] and fourth.waiting == []
    assert names(apiserver) == {f"r1-eval-{s}" for s in (20, 30, 40, 50, 60)}


def test_a_job_another_follower_created_counts_and_is_not_duplicated(apiserver, cluster, tmp_path):
    run_dir = tmp_path / "r2"
    for step in (1, 2):
        commit(run_dir, step)
    evals, storage = plan(run_dir, limit=1), open_run_storage(str(run_dir))
    other = schedule_pass(cluster, evals, storage)  # "the other follower"
    assert other.submitted == [1]
    mine = schedule_pass(cluster, evals, storage)
    assert mine.submitted == [] and mine.unfinished == 1 and mine.waiting == [2]
    assert len(apiserver.list("jobs", NAMESPACE)) == 1


def test_a_race_to_the_same_name_creates_one_job(apiserver, cluster, tmp_path):
    """Two passes listing at once both try the oldest checkpoint: AlreadyExists for one."""
    run_dir = tmp_path / "r3"
    commit(run_dir, 5)
    evals, storage = plan(run_dir, limit=4), open_run_storage(str(run_dir))
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(schedule_pass(cluster, evals, storage)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(len(r.submitted) for r in results) == 1
    assert names(apiserver) == {"r3-eval-5"}


class EvalController:
    """Finishes each eval Job `delay_s` after it appears; records the most unfinished at once."""

    def __init__(self, apiserver, delay_s: float) -> None:
        self.apiserver, self.delay_s = apiserver, delay_s
        self.most_unfinished = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        seen: dict[str, float] = {}
        while not self.stop.wait(0.005):
            jobs = [
                j
                for j in self.apiserver.list("jobs", NAMESPACE)
                if j["metadata"]["labels"].get("trainstack.io/component") == "eval"
            ]
            unfinished = [j for j in jobs if not (j.get("status") or {}).get("conditions")]
            self.most_unfinished = max(self.most_unfinished, len(unfinished))
            for job in unfinished:
                name = job["metadata"]["name"]
                if time.monotonic() - seen.setdefault(name, time.monotonic()) > self.delay_s:
                    finish(self.apiserver, name)


@pytest.mark.parametrize("limit", [1, 2])
def test_launch_wait_submits_each_checkpoints_eval_job_n_at_a_time(
    trainstack, apiserver, tmp_path, capsys, limit
):
    run_id = f"ev{limit}"
    run_dir = tmp_path / "runs" / run_id
    # The simulated job trains for about a second; its checkpoints land meanwhile.
    apiserver.operator.plans[run_id] = [JobPlan(steps=20, step_seconds=0.05)]
    controller = EvalController(apiserver, delay_s=0.15)

    def land_checkpoints() -> None:
        while run_id not in {j["metadata"]["name"] for j in apiserver.list("pytorchjobs")}:
            time.sleep(0.01)
        for step in (2, 4, 6, 8):
            commit(run_dir, step)
            time.sleep(0.1)

    lander = threading.Thread(target=land_checkpoints, daemon=True)
    lander.start()
    try:
        code = trainstack(
            "launch",
            "--wait",
            f"run_id={run_id}",
            "eval.every_checkpoint=true",
            "eval.tasks=[arc_easy]",
            f"eval.max_concurrent={limit}",
            "backend.poll_interval_s=0.02",
            launch=True,
        )
        lander.join()
    finally:
        controller.stop.set()
        controller.thread.join()
    out = capsys.readouterr().out
    assert code == 0, out
    evals = {j["metadata"]["name"] for j in apiserver.list("jobs", NAMESPACE)}
    assert evals == {job_name(run_id, s) for s in (2, 4, 6, 8)}, out
    assert 1 <= controller.most_unfinished <= limit
    assert out.count(f"eval job {run_id}-eval-") == 4, out
    # What a pod leaves (results.json under eval/step-N/) is what `status` shows for the run.
    results = run_dir / "eval" / "step-00000002" / "results.json"
    results.parent.mkdir(parents=True)
    results.write_text(json.dumps({"results": {"arc_easy": {"acc,none": 0.5}}}))
    assert trainstack("status", run_id, "--backend", "kubernetes") == 0
    status = capsys.readouterr().out
    (line,) = [x for x in status.splitlines() if x.startswith("eval")]
    assert "step-00000002" in line and "arc_easy acc=0.5" in line, status


def test_a_failed_run_submits_no_more_eval_jobs(trainstack, apiserver, tmp_path, capsys):
    run_id = "evf"
    apiserver.operator.plans[run_id] = [JobPlan(steps=2, step_seconds=0.01, outcome="Failed")]
    code = trainstack(
        "launch",
        "--wait",
        f"run_id={run_id}",
        "eval.every_checkpoint=true",
        "eval.tasks=[arc_easy]",
        "job.max_retries=0",
        "backend.poll_interval_s=0.02",
        launch=True,
    )
    out = capsys.readouterr().out
    assert code != 0 and f"{run_id}: no more eval jobs submitted" in out, out
    assert apiserver.list("jobs", NAMESPACE) == []


def test_a_pass_that_fails_is_a_line_and_the_follow_goes_on(monkeypatch, tmp_path):
    sleeps: list[float] = []

    def broken(*_):
        raise eval_schedule.ClusterError("list Jobs in training failed: 503")

    monkeypatch.setattr(eval_schedule, "schedule_pass", broken)
    lines = list(eval_schedule.finish_evals(None, plan(tmp_path / "r4", 1), sleeps.append))
    assert len(sleeps) == eval_schedule.MAX_FAILED_PASSES - 1
    assert "eval jobs not submitted this time: list Jobs in training failed: 503" in lines[0]
    assert "gave up submitting eval jobs" in lines[-1]
