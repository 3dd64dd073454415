"""Everything under a run dir is written by a user's code: the service parses it like a
request body, bounded in size and time, and no run's files can fail another request (the
runs list, the dashboard, another run's pages) or anyone else's."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import start_api
from tests.api.test_api_auth_and_cluster import sign_in
from tests.api.test_api_runs import wait_for

BAD_STEPS = [
    '{"step": 8.5, "loss": 1.0}',
    '{"step": NaN, "loss": 1.0}',
    '{"step": Infinity, "loss": 1.0}',
    '{"step": -Infinity}',
    '{"step": -3, "loss": 1.0}',
    '{"step": "7", "loss": 1.0}',
    '{"step": true, "loss": 1.0}',
    '{"step": 1e400, "loss": 1.0}',
    '{"step": ' + "9" * 400 + ', "loss": 1.0}',
    '{"step": 3, "loss": NaN, "tokens_seen": Infinity, "x": [[[1]]]}',
    '{"step": 4, "loss": "high", "mfu/percent": ' + "9" * 400 + "}",
    '{"step": 5, "loss": {"a": 1}}',
    '{"step": 6, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "[" * 100_000,
    '{"step": 7, "pad": "' + "x" * 200_000 + '"}',
    "\xff\xfe not utf-8",
    "null",
    "[1, 2]",
]
CONFIGS = [
    "trainer: 5\n",
    "trainer: [1, 2]\n",
    "trainer: max_steps\n",
    "trainer: {max_steps: 9.5}\n",
    "trainer: {max_steps: .inf}\n",
    "trainer: {max_steps: true}\n",
    "- 1\n- 2\n",
    "a: &a [*a]\n",  # a node that contains itself
    "x: !!python/object/apply:os.system ['true']\n",  # not a safe tag: never run
    "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
    + "".join(
        f"{c}: &{c} [" + ",".join(["*" + p] * 9) + "]\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True)
    ),
    "{" * 5000 + "}" * 5000,
    "key: " + "v" * 300_000 + "\n",
    ":\n  - ][\n",
]


def write_run_files(run_dir: Path, metrics: list[str] | None = None, config: str | None = None):
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    if metrics is not None:
        good = [json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2)]
        text = "\n".join([*good, *metrics]) + "\n"
        (run_dir / "logs" / "metrics.jsonl").write_bytes(text.encode("utf-8", "surrogateescape"))
    if config is not None:
        (run_dir / "config.yaml").write_text(config)


def every_read(api, run_id: str) -> dict[str, int]:
    """Status of every route that reads a run's files, for its owner and on the dashboard."""
    cookies = {"trainstack_session": sign_in(api.url)}
    answers = {
        path: api.client.get(path).status_code
        for path in (
            "/v1/runs",
            f"/v1/runs/{run_id}",
            f"/v1/runs/{run_id}/metrics",
            f"/v1/runs/{run_id}/metrics?after_step=1&limit=1",
            f"/v1/runs/{run_id}/logs",
        )
    }
    for path in ("/", f"/runs/{run_id}", f"/ui/figure?run={run_id}"):
        answers[path] = httpx.get(f"{api.url}{path}", cookies=cookies, timeout=60).status_code
    return answers


@pytest.mark.parametrize("line", BAD_STEPS)
def test_a_runs_metrics_line_fails_no_request(api, apiserver, line):
    apiserver.operator.plans["m1"] = [JobPlan(hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request("m1")).status_code == 201
    write_run_files(api.runs_root / "m1", metrics=[line])
    api.service.snapshot.invalidate()
    answers = every_read(api, "m1")
    assert all(code == 200 for code in answers.values()), answers
    page = api.client.get("/v1/runs/m1/metrics").json()
    steps = [r["step"] for r in page["records"]]
    assert steps[:2] == [1, 2] and all(isinstance(s, int) and s >= 0 for s in steps)
    run = api.client.get("/v1/runs/m1").json()
    assert run["last_loss"] is None or isinstance(run["last_loss"], float)


@pytest.mark.parametrize("config", CONFIGS)
def test_a_runs_config_fails_no_request_even_after_a_restart(
    kubeconfig, token_dir, tmp_path, apiserver, monkeypatch, config
):
    monkeypatch.chdir(tmp_path)
    server, api = start_api(kubeconfig, token_dir, tmp_path / "runs")
    try:
        apiserver.operator.plans["c1"] = [JobPlan(hold=True)]
        assert api.client.post("/v1/runs", json=api.run_request("c1")).status_code == 201
        write_run_files(api.runs_root / "c1", metrics=[], config=config)
        wait_for(lambda: api.client.get("/v1/runs/c1").json()["state"] == "running")
    finally:
        api.client.close()
        server.stop()
    # The service restarts: its first snapshot reads the config in line.
    server, api = start_api(kubeconfig, token_dir, tmp_path / "runs")
    try:
        answers = every_read(api, "c1")
        assert all(code == 200 for code in answers.values()), answers
        assert api.client.get("/v1/runs/c1").json()["max_steps"] is None
        assert api.client.delete("/v1/runs/c1").status_code == 202
    finally:
        api.client.close()
        server.stop()
