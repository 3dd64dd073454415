"""Issue 45 items 2 and 5: `trainstack eval` on the CPU with a local multiple-choice and a
generation task, results under eval/<checkpoint>/ shown by status and runs; the same tasks
through `trainstack serve-model` and `--endpoint` give the same scores (per-choice
log-likelihoods within 1e-3)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from testing_support.eval_tasks import GEN_TASK, MC_TASK
from trainer.evaluation.results import list_evals
from trainer.storage import open_run_storage

pytestmark = pytest.mark.slow


def samples(eval_dir: Path, task: str) -> list[dict]:
    lines = (eval_dir / f"samples_{task}.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda s: s["doc_id"])


def choice_logprobs(eval_dir: Path) -> list[list[float]]:
    return [[r[0][0] for r in s["resps"]] for s in samples(eval_dir, MC_TASK)]


@pytest.fixture(scope="module")
def direct(workspace) -> Path:
    done = workspace.trainstack("eval", "tiny", *workspace.tasks_args())
    assert done.returncode == 0, done.stderr
    assert "evaluated step 4 of tiny (export)" in done.stdout
    return workspace.cwd / "runs/tiny/eval/step-00000004"


def test_eval_writes_lm_evals_results_and_samples(direct: Path, workspace):
    results = json.loads((direct / "results.json").read_text())
    assert {MC_TASK, GEN_TASK} <= set(results["results"])
    assert results["trainstack"]["step"] == 4 and results["trainstack"]["via"] == "export"
    assert results["n-samples"][MC_TASK]["effective"] == 8
    assert len(samples(direct, MC_TASK)) == 8 and len(samples(direct, GEN_TASK)) == 8
    # Four choices each, scored by the model: finite and not all equal.
    scored = choice_logprobs(direct)
    assert all(len(row) == 4 and len(set(row)) > 1 for row in scored)
    summary = list_evals(open_run_storage(str(workspace.cwd / "runs/tiny")))
    by_name = {s.checkpoint: s for s in summary}
    assert 0 <= by_name["step-00000004"].scores[MC_TASK]["acc,none"] <= 1
    assert "exact_match,none" in by_name["step-00000004"].scores[GEN_TASK]


def test_status_and_runs_show_the_scores(direct: Path, workspace):
    status = workspace.trainstack("status", "tiny")
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if x.startswith("eval"))
    assert "step-00000004" in line and f"{MC_TASK} acc=" in line
    runs = workspace.trainstack("runs")
    assert runs.returncode == 0, runs.stderr
    row = next(x for x in runs.stdout.splitlines() if x.lstrip().startswith("tiny"))
    assert "4: " in row and "eval" in runs.stdout.splitlines()[0]


def test_the_served_model_answers_the_openai_routes(served):
    with httpx.Client(base_url=served.url, timeout=60) as client:
        assert client.get("/health").json()["status"] == "ok"
        assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"
        chat = client.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3,
                "temperature": 0,
            },
        ).json()
        assert chat["choices"][0]["message"]["role"] == "assistant"
        assert chat["usage"]["completion_tokens"] <= 3


def test_eval_through_the_endpoint_gives_the_same_scores(direct: Path, served, workspace):
    done = workspace.trainstack("eval", "tiny", "--endpoint", served.url, *workspace.tasks_args())
    assert done.returncode == 0, done.stderr
    assert "(endpoint)" in done.stdout
    via = workspace.cwd / "runs/tiny/eval/step-00000004-endpoint"
    ours, theirs = choice_logprobs(direct), choice_logprobs(via)
    assert len(ours) == len(theirs) == 8
    worst = max(abs(a - b) for row, other in zip(ours, theirs, strict=True)
                for a, b in zip(row, other, strict=True))  # fmt: skip
    assert worst < 1e-3, worst
    direct_results = json.loads((direct / "results.json").read_text())["results"]
    via_results = json.loads((via / "results.json").read_text())["results"]
    for task, metric in ((MC_TASK, "acc,none"), (MC_TASK, "acc_norm,none"),
                         (GEN_TASK, "exact_match,none")):  # fmt: skip
        assert via_results[task][metric] == direct_results[task][metric], (task, metric)
    # Greedy generation agrees token for token.
    gen = [s["resps"] for s in samples(direct, GEN_TASK)]
    assert gen == [s["resps"] for s in samples(via, GEN_TASK)]


def test_eval_with_a_limit_scores_that_many(workspace):
    """(Last: it replaces the full evaluation of step 4 the tests above read.)"""
    done = workspace.trainstack("eval", "tiny", *workspace.tasks_args(), "eval.limit=2",
                                "--step", "4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads((workspace.cwd / "runs/tiny/eval/step-00000004/results.json").read_text())
    assert results["n-samples"][MC_TASK]["effective"] == 2
