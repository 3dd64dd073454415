"""Polling stays cheap as runs grow: a run's metrics.jsonl on S3 is read incrementally (a
ranged GET of what was appended, a 304 when nothing was), `/metrics` is paged, and figures are
cut to the screen's width. Bytes are counted where S3 sends them (the fault proxy)."""

from __future__ import annotations

import json

import httpx
import pytest

from testing_support.k8s.fake_operator import JobPlan
from tests.api.test_api_auth_and_cluster import sign_in

LINES = 40_000
EVAL_EVERY = 100


def line(step: int) -> str:
    record = {
        "step": step,
        "loss": 4.0 / (1 + step / 1000),
        "tokens_seen": 4096 * step,
        "throughput/tokens_per_s": 91234.5,
        "mfu/percent": 41.25,
        "memory/max_allocated_gib": 61.5,
        "memory/max_rss_gib": 12.25,
    }
    text = json.dumps(record) + "\n"
    if step % EVAL_EVERY == 0:
        text += json.dumps({"step": step, "eval_loss": 4.1 / (1 + step / 1000)}) + "\n"
    return text


def metrics_bytes_read(proxy, since: int) -> int:
    """Response bytes of GETs of metrics.jsonl among the proxy's transfers from `since`."""
    return sum(
        t.received
        for t in proxy.transfers[since:]
        if t.method == "GET" and t.path.split("?")[0].endswith("metrics.jsonl")
    )


@pytest.fixture
def s3_api(
    kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch, fault_proxy, s3_bucket
):
    """As deployed: the service's storage root is the stack's bucket (moto, behind the proxy)."""
    from tests.api.conftest import start_api

    monkeypatch.chdir(tmp_path)
    server, handle = start_api(kubeconfig, token_dir, f"s3://{s3_bucket}/runs")
    yield handle
    handle.client.close()
    server.stop()


def test_a_large_metrics_file_costs_bounded_bytes_per_poll(
    s3_api, apiserver, fault_proxy, s3_bucket
):
    api = s3_api
    body = "".join(line(s) for s in range(1, LINES + 1))
    size = len(body.encode())
    assert size > 5_000_000
    key = "runs/big/logs/metrics.jsonl"
    client = fault_proxy_client()
    client.put_object(Bucket=s3_bucket, Key=key, Body=body.encode())
    client.put_object(
        Bucket=s3_bucket, Key="runs/big/config.yaml", Body=b"trainer:\n  max_steps: 90000\n"
    )
    apiserver.operator.plans["big"] = [JobPlan(hold=True)]
    request = api.run_request("big")
    # The runs list: its first look at the run reads the file's tail, not the file.
    mark = len(fault_proxy.transfers)
    assert api.client.post("/v1/runs", json=request).status_code == 201
    api.service.snapshot.invalidate()
    run = api.client.get("/v1/runs/big").json()
    assert run["last_step"] == LINES and run["progress"] is not None
    first_look = metrics_bytes_read(fault_proxy, mark)
    assert 0 < first_look <= 64 * 1024, first_look

    # Nothing new: polls read nothing (304s); ten new lines: only those are read.
    mark = len(fault_proxy.transfers)
    for _ in range(3):
        api.service.snapshot.invalidate()
        assert api.client.get("/v1/runs").status_code == 200
    assert metrics_bytes_read(fault_proxy, mark) == 0
    more = "".join(line(s) for s in range(LINES + 1, LINES + 11))
    body += more
    client.put_object(Bucket=s3_bucket, Key=key, Body=body.encode())  # as the trainer appends
    mark = len(fault_proxy.transfers)
    api.service.snapshot.invalidate()
    assert api.client.get("/v1/runs/big").json()["last_step"] == LINES + 10
    # (and the newline before them: a file replaced by another is noticed, not misread)
    assert metrics_bytes_read(fault_proxy, mark) == len(more.encode()) + 1

    # /metrics comes a page at a time, and a page is read by the index, not the file.
    first = api.client.get("/v1/runs/big/metrics")
    assert first.status_code == 200
    page = first.json()
    assert len(page["records"]) == 1000 and page["next_after_step"] is not None
    assert len(first.content) < 300_000
    # Each request indexes at most REFRESH_BYTES more of the file: a few polls index it all.
    for _ in range(10):
        assert api.client.get("/v1/runs/big/metrics", params={"limit": 1}).status_code == 200
    mark = len(fault_proxy.transfers)
    following = api.client.get(
        "/v1/runs/big/metrics", params={"after_step": page["next_after_step"], "limit": 500}
    ).json()
    steps = [r["step"] for r in following["records"]]
    assert steps[0] == page["next_after_step"] + 1 and len(steps) == 500
    per_page = metrics_bytes_read(fault_proxy, mark)
    assert per_page < 2 * (500 + 256) * 250, per_page  # the page's blocks (lines < 250 B)
    last = api.client.get("/v1/runs/big/metrics", params={"after_step": LINES + 5}).json()
    assert [r["step"] for r in last["records"]] == list(range(LINES + 6, LINES + 11))
    assert last["next_after_step"] is None

    # The dashboard's figure: each series cut to the chart's width; a poll reads nothing new.
    cookies = {"trainstack_session": sign_in(api.url)}
    mark = len(fault_proxy.transfers)
    figure = httpx.get(f"{api.url}/ui/figure?run=big&width=500", cookies=cookies, timeout=60)
    assert figure.status_code == 200
    assert metrics_bytes_read(fault_proxy, mark) == 0  # the /metrics calls read it already
    loss = next(c for c in figure.json()["charts"] if c["id"] == "loss_step")
    train, evals = loss["series"]
    assert len(train["x"]) <= 4 * 500 and len(evals["x"]) == (LINES + 10) // EVAL_EVERY
    assert min(train["y"]) == 4.0 / (1 + (LINES + 10) / 1000)  # the extremes survive
    assert figure.json()["runs"][0]["points"] == LINES + 10 + (LINES + 10) // EVAL_EVERY
    assert len(figure.content) < 200_000


def fault_proxy_client():
    from trainer.storage.s3 import make_s3_client

    return make_s3_client()


def test_the_last_step_follows_appends_partial_lines_and_a_replaced_file(tmp_path):
    from jobs.plot.metrics import LastMetrics, MetricsFile

    metrics = tmp_path / "logs" / "metrics.jsonl"
    metrics.parent.mkdir()
    metrics.write_text(line(1) + line(2))
    last, run = LastMetrics(), MetricsFile("r", str(tmp_path))
    assert last.get(str(tmp_path))[0] == 2 and run.refresh().count == 2
    with metrics.open("a") as fh:
        fh.write('{"step": 3, "lo')  # being written
    assert last.get(str(tmp_path))[0] == 2 and run.refresh().count == 2
    with metrics.open("a") as fh:
        fh.write('ss": 1.5}\n')
    assert last.get(str(tmp_path)) == (3, 1.5) and run.refresh().count == 3
    # A new run in the same dir: another, longer file (not a continuation of the old one).
    metrics.unlink()
    metrics.write_text("".join(line(s) for s in range(100, 140)))
    assert last.get(str(tmp_path))[0] == 139
    assert run.refresh().count == 41  # 40 training lines and the eval line at step 100


def test_a_page_costs_bounded_reads_whatever_the_file_holds(tmp_path):
    """Finding 5: the first page of a large file reads at most REFRESH_BYTES to index plus
    the page's blocks, and keeps at most KEPT_ROWS records for figures; paging on reaches
    every record, in order, each request bounded the same way."""
    from jobs.plot.metrics import KEPT_ROWS, PAGE_BYTES, REFRESH_BYTES, MetricsFiles

    lines = 60_000
    body = "".join(line(s) for s in range(1, lines + 1))
    assert len(body) > 2 * REFRESH_BYTES
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.jsonl").write_text(body)
    files = MetricsFiles()
    seen, after, requests, metrics = [], None, 0, None
    while True:
        before = metrics.bytes_read if metrics is not None else 0
        metrics = files.get("r", str(tmp_path))  # what the route does: refresh, then page
        records, more = metrics.page(after, 10_000)
        assert metrics.bytes_read - before <= REFRESH_BYTES + PAGE_BYTES
        assert len(metrics.columns["step"]) <= KEPT_ROWS
        requests += 1
        seen += [r["step"] for r in records if "loss" in r]
        if not more:
            break
        after = records[-1]["step"] if records else (after if after is not None else -1)
    assert seen == list(range(1, lines + 1))
    assert metrics.count == lines + lines // EVAL_EVERY
    assert metrics.bytes_read <= 2.5 * len(body)  # indexed once, each page's blocks about once
    assert requests >= len(body) // REFRESH_BYTES  # indexing was spread over requests
    figure = metrics.downsampled(500)
    assert min(r["loss"] for r in figure.records if "loss" in r) == 4.0 / (1 + lines / 1000)


def test_out_of_order_steps_do_not_make_a_page_scan_the_file(tmp_path):
    """Finding 10: blocks whose largest step is not after `after_step` are not read."""
    from jobs.plot.metrics import BLOCK_RECORDS, MetricsFile

    steps = list(range(100_000, 0, -1))  # written backwards
    (tmp_path / "logs").mkdir()
    text = "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in steps)
    (tmp_path / "logs" / "metrics.jsonl").write_text(text)
    metrics = MetricsFile("r", str(tmp_path)).refresh()
    before = metrics.bytes_read
    records, more = metrics.page(99_990, 1000)
    assert [r["step"] for r in records] == list(range(100_000, 99_990, -1)) and not more
    per_line = len(text) / len(steps)
    assert metrics.bytes_read - before <= 2 * BLOCK_RECORDS * per_line
