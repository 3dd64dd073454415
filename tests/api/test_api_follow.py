"""Following logs cannot exhaust the server: followers of one rank share one stream from the
cluster, a follower that hangs up leaves nothing behind within seconds, and a token may hold
only a few follows at a time (429 past that)."""

from __future__ import annotations

import threading
import time

import httpx

from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import TOKEN, start_api
from tests.api.test_api_runs import wait_for

FOLLOWERS = 50


def api_threads() -> int:
    """Threads of this process but the fake apiserver's connection handlers (counted by its
    open streams instead)."""
    return sum(1 for t in threading.enumerate() if "process_request_thread" not in t.name)


def held_run(api, apiserver, run_id: str) -> list[str]:
    """A running job that wrote its steps and goes on (nothing more to send): its log."""
    apiserver.operator.plans[run_id] = [JobPlan(steps=3, hold=True)]
    assert api.client.post("/v1/runs", json=api.run_request(run_id)).status_code == 201
    return wait_for(
        lambda: (
            "step 3" in (text := api.client.get(f"/v1/runs/{run_id}/logs").text)
            and text.splitlines()
        )
    )


def open_follow(client: httpx.Client, run_id: str):
    """(response, its line iterator, first line): the iterator is kept, since dropping it
    closes the response."""
    request = client.build_request("GET", f"/v1/runs/{run_id}/logs?follow=true")
    response = client.send(request, stream=True)
    assert response.status_code == 200, response.read()
    lines = response.iter_lines()
    return response, lines, next(lines)


def test_fifty_followers_share_one_stream_and_leave_nothing_when_they_hang_up(
    kubeconfig, apiserver, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    server, api = start_api(
        kubeconfig, token_dir, tmp_path / "runs", max_follows_per_caller=FOLLOWERS
    )
    clients = []
    try:
        log = held_run(api, apiserver, "f1")
        time.sleep(0.5)
        baseline = api_threads()
        assert apiserver.open_streams == 0
        followers = []
        for _ in range(FOLLOWERS):
            client = httpx.Client(
                base_url=api.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
            )
            clients.append(client)
            followers.append(open_follow(client, "f1"))
        # Late joiners get the lines written before they came (the first is the log's or the
        # state line).
        assert api.service.follows.upstreams_started == 1
        firsts = {first for *_, first in followers}
        assert len(firsts) == 1 and firsts <= {log[0], "[trainstack] f1: Running"}, firsts
        # One log stream and one watch for all fifty; a handful of threads, not 3 each.
        assert apiserver.open_streams <= 2, apiserver.open_streams
        assert api.service.follows.upstreams_started == 1
        assert api_threads() <= baseline + 6, (api_threads(), baseline)
        for response, *_ in followers:
            response.close()
        for client in clients:
            client.close()
        deadline = time.monotonic() + 5
        while (api_threads() > baseline or apiserver.open_streams) and time.monotonic() < deadline:
            time.sleep(0.1)
        threads_after = api_threads()
        print(f"threads: baseline {baseline}, after {FOLLOWERS} followers hung up {threads_after}")
        assert threads_after <= baseline, [t.name for t in threading.enumerate()]
        assert apiserver.open_streams == 0
        assert api.service.follows.active == 0
    finally:
        for client in clients:
            client.close()
        api.client.close()
        server.stop()


def test_a_token_holds_a_few_follows_at_most(
    kubeconfig, apiserver, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    server, api = start_api(kubeconfig, token_dir, tmp_path / "runs", max_follows_per_caller=2)
    clients = [
        httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        for _ in range(3)
    ]
    try:
        held_run(api, apiserver, "f2")
        first, *_ = open_follow(clients[0], "f2")
        second = open_follow(clients[1], "f2")
        assert second[2]
        refused = clients[2].get("/v1/runs/f2/logs?follow=true")
        assert refused.status_code == 429, refused.text
        assert "at most 2" in refused.json()["detail"]
        assert clients[2].get("/v1/runs/f2/logs").status_code == 200  # reading is not following
        first.close()
        clients[0].close()
        wait_for(lambda: api.service.follows.held < 2)
        again, _, line = open_follow(clients[2], "f2")
        assert line
        again.close()
    finally:
        for client in clients:
            client.close()
        api.client.close()
        server.stop()


def test_a_follow_the_cluster_fails_under_ends_with_one_line_saying_why(
    kubeconfig, apiserver, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch
):
    """The status is sent when the follow starts; a failure after it (here the API server
    unreachable past MAX_OUTAGE_S, made 0) is the stream's last line, not a silent end that
    reads like the run's."""
    from jobs.backends.kubernetes.client import watch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(watch, "MAX_OUTAGE_S", 0.0)
    server, api = start_api(kubeconfig, token_dir, tmp_path / "runs")
    try:
        apiserver.operator.plans["f3"] = [JobPlan(hold=True, step_seconds=0.05)]
        apiserver.faults.drop_log_after = [2] * 1000  # each stream is cut after two lines ...
        assert api.client.post("/v1/runs", json=api.run_request("f3")).status_code == 201
        with httpx.Client(
            base_url=api.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        ) as client:
            response, lines, first = open_follow(client, "f3")
            apiserver.faults.outage = lambda: True  # ... and the server does not come back
            rest = list(lines)
            response.close()
        last = (rest or [first])[-1]
        assert last.startswith("[trainstack] f3: log follow failed: "), last  # log or watch
        assert "503 Service Unavailable: injected outage" in last
        assert sum("log follow failed" in line for line in [first, *rest]) == 1
    finally:
        apiserver.faults.outage = None
        api.client.close()
        server.stop()
