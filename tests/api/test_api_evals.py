"""`GET /v1/runs/{id}/evals`: a run's `trainstack eval` results by checkpoint, read bounded:
a results.json past MAX_RESULTS_BYTES is listed with an error, never parsed; an evaluation cut
short (no results.json) and folders that are no checkpoint's are not listed. The dashboard's
run page shows the same answer as a table."""

from __future__ import annotations

import json
import re

from testing_support.k8s.fake_operator import JobPlan
from trainer.evaluation.results import MAX_RESULTS_BYTES


def results(acc: float) -> dict:
    return {
        "results": {
            "ts_mc": {"alias": "ts_mc", "acc,none": acc, "acc_stderr,none": 0.1, "sample_len": 8},
            "ts_gen": {"exact_match,none": 0.5, "exact_match_stderr,none": 0.2},
        },
        "trainstack": {"step": 10},
    }


def test_evals_are_listed_by_checkpoint_and_bounded(api, apiserver, tmp_path):
    apiserver.operator.plans["ev"] = [JobPlan(hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request("ev")).status_code == 201
    evals = tmp_path / "runs/ev/eval"
    for name, body in (
        ("step-00000010", json.dumps(results(0.25))),
        ("step-00000010-endpoint", json.dumps(results(0.25))),
        ("step-00000020", "{not json"),
        ("step-00000030", " " * (MAX_RESULTS_BYTES + 1)),
        ("notes", json.dumps(results(1.0))),
    ):
        (evals / name).mkdir(parents=True)
        (evals / name / "results.json").write_text(body)
    (evals / "step-00000040").mkdir()  # cut short: samples only
    (evals / "step-00000040/samples_ts_mc.jsonl").write_text("{}\n")

    answer = api.client.get("/v1/runs/ev/evals")
    assert answer.status_code == 200, answer.text
    listed = answer.json()["evals"]
    assert [e["checkpoint"] for e in listed] == [
        "step-00000010", "step-00000010-endpoint", "step-00000020", "step-00000030"]  # fmt: skip
    first = listed[0]
    assert (first["step"], first["via"], first["error"]) == (10, "export", None)
    assert first["scores"] == {"ts_mc": {"acc,none": 0.25}, "ts_gen": {"exact_match,none": 0.5}}
    assert listed[1]["via"] == "endpoint"
    assert listed[2]["error"] == "results.json is not valid JSON" and listed[2]["scores"] == {}
    assert listed[3]["error"] == f"results.json over {MAX_RESULTS_BYTES} bytes"


def test_evals_of_a_run_without_any_and_of_no_run(api, apiserver):
    apiserver.operator.plans["none"] = [JobPlan(hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request("none")).status_code == 201
    assert api.client.get("/v1/runs/none/evals").json() == {"run_id": "none", "evals": []}
    assert api.client.get("/v1/runs/nosuch/evals").status_code == 404


def test_a_deeply_nested_results_json_is_listed_with_an_error(api, apiserver, tmp_path):
    """`[` * 100000 is past json's recursion limit: an error in the listing, never a 500."""
    apiserver.operator.plans["deep"] = [JobPlan(hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request("deep")).status_code == 201
    folder = tmp_path / "runs/deep/eval/step-00000010"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text("[" * 100_000)
    answer = api.client.get("/v1/runs/deep/evals")
    assert answer.status_code == 200, answer.text
    (listed,) = answer.json()["evals"]
    assert listed["error"] == "results.json nested over 64 levels" and listed["scores"] == {}


def test_the_run_page_shows_the_evals_escaped_and_the_figure_draws_them(api, apiserver, tmp_path):
    """The dashboard's run page: a table of the same answer (step, via, task, metric, value;
    newest step first), every name escaped (a run's own results.json gives them); its figure
    has the scores beside the loss."""
    import httpx

    from tests.api.test_api_auth_and_cluster import sign_in

    apiserver.operator.plans["evp"] = [JobPlan(hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request("evp")).status_code == 201
    evals = tmp_path / "runs/evp/eval"
    hostile = {"<script>alert(1)</script>": {"acc,none": 0.125}}
    for name, body in (
        ("step-00000010", json.dumps(results(0.25))),
        ("step-00000020", json.dumps({"results": hostile})),
        ("step-00000030", "{not json"),
    ):
        (evals / name).mkdir(parents=True)
        (evals / name / "results.json").write_text(body)
    cookies = {"trainstack_session": sign_in(api.url)}
    page = httpx.get(f"{api.url}/runs/evp", cookies=cookies)
    assert page.status_code == 200, page.text
    table = page.text[page.text.index('<table id="evals">') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r'<tr data-step="(\d+)">(.*?)</tr>', table)
    cells = [(step, re.findall(r"<td[^>]*>(.*?)</td>", row)) for step, row in rows]
    assert cells == [
        ("30", ["30", "export", "results.json is not valid JSON"]),
        ("20", ["20", "export", "&lt;script&gt;alert(1)&lt;/script&gt;", "acc", "0.1250"]),
        ("10", ["10", "export", "ts_mc", "acc", "0.2500"]),
        ("10", ["10", "export", "ts_gen", "exact_match", "0.5000"]),
    ]
    assert "<script>alert" not in page.text
    figure = httpx.get(f"{api.url}/ui/figure?run=evp", cookies=cookies).json()
    (scores,) = [c for c in figure["charts"] if c["id"] == "eval_scores"]
    assert {s["label"]: s["x"] for s in scores["series"]} == {
        "ts_mc acc": [10.0],
        "ts_gen exact_match": [10.0],
        "<script>alert(1)</script> acc": [20.0],  # JSON, drawn by uPlot as text
    }


def test_a_run_page_without_evals_has_no_table(api, apiserver):
    import httpx

    from tests.api.test_api_auth_and_cluster import sign_in

    apiserver.operator.plans["noev"] = [JobPlan(hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request("noev")).status_code == 201
    page = httpx.get(f"{api.url}/runs/noev", cookies={"trainstack_session": sign_in(api.url)})
    assert page.status_code == 200 and 'id="evals"' not in page.text
