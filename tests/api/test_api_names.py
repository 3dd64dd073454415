"""Names end where they seem to: `$` matches before a final newline, so every name pattern
anchors with `\\Z` (finding 14); and requests that once raised inside the service are one
4xx line."""

from __future__ import annotations

import pytest

from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE


@pytest.mark.parametrize(
    "fields",
    [
        {"run_id": "abc\n"},
        {"overrides": ["run_id='abc\n'"]},
        {"overrides": ["sweep_id='sw\n'"]},
        {"overrides": ["job.priority='urgent\n'"]},
        {"overrides": ["job.owner='mallory\n'"]},
        {"image": IMAGE + "\n"},
        {"image": "registry.example.com/trainer:v1\n"},
        {"model": "tiny\n"},
        {"args": {"flag\n": 1}, "runner": "command", "command": ["python", "train.py"]},
        {"overrides": ["+runner.env.NAME\n=1"]},
        {"init_from": "hf://org/model\n"},
        {"trainer": {"resume_from": "abc\n"}},
    ],
)
def test_a_name_with_a_trailing_newline_is_refused(api, apiserver, fields):
    request = {"compute": GPU_TYPE, "image": IMAGE, **fields}
    response = api.client.post("/v1/runs", json=request, params={"dryrun": "true"})
    assert 400 <= response.status_code < 500, response.text
    assert "\n" not in response.json()["detail"]
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_names_match_to_their_end():
    from jobs.api.request_policy import KEY, OPTION_NAME
    from jobs.naming import run_id_problem
    from jobs.references import DNS1123_SUBDOMAIN, LABEL_VALUE, image_reference_problem

    for pattern in (KEY, OPTION_NAME, DNS1123_SUBDOMAIN, LABEL_VALUE):
        assert pattern.match("abc") and not pattern.match("abc\n")
    assert run_id_problem("abc") is None and run_id_problem("abc\n") is not None
    assert image_reference_problem("registry.example.com/trainer:v1\n") is not None


@pytest.mark.parametrize("init_from", ["hf://org/model", "hf://org/model@main"])
def test_a_command_runner_with_a_hub_model_is_one_422_line(api, apiserver, init_from):
    request = api.run_request(
        "hf1", runner="command", command=["python", "train.py"], init_from=init_from
    )
    for dryrun in ("true", "false"):
        response = api.client.post("/v1/runs", json=request, params={"dryrun": dryrun})
        assert 400 <= response.status_code < 500, response.text
    assert "model.init_from: runner=command does not read it" in response.json()["detail"]
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["compute.nodes=2", "job.elastic.min_nodes=1", "job.elastic.max_nodes=1000000"], "max"),
        (["compute.nodes=2", "job.elastic.min_nodes=1", "job.elastic.max_nodes=1000000000"], "max"),
        (["compute.nodes=100000"], "nodes"),
    ],
)
def test_node_counts_are_bounded_before_any_plan(api, apiserver, overrides, key):
    """Finding 4: one plan per elastic world size made max_nodes=10^6 cost minutes."""
    import time

    from jobs.validate_compute import MAX_NODES

    started = time.monotonic()
    request = api.run_request("el1", overrides=overrides)
    response = api.client.post("/v1/runs", json=request, params={"dryrun": "true"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    wanted = "job.elastic.max_nodes" if key == "max" else "compute.nodes"
    assert detail.startswith(f"{wanted}: must be <= {MAX_NODES}"), detail
    assert time.monotonic() - started < 10
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_a_request_map_is_bounded(api, apiserver):
    """Finding 8: 6,500 args held the shared composition lock for 10 s per request."""
    from jobs.api.models import MAX_MAP_ENTRIES

    many = {f"flag{i}": i for i in range(MAX_MAP_ENTRIES + 1)}
    for fields in (
        {"runner": "command", "command": ["python", "train.py"], "args": many},
        {"trainer": many},
    ):
        response = api.client.post("/v1/runs", json=api.run_request("big1", **fields))
        assert response.status_code == 422, response.text
        assert f"at most {MAX_MAP_ENTRIES} items" in response.json()["detail"]
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_one_user_holds_at_most_one_place_in_the_composition_queue(api):
    """Finding 8: however many requests one user sends, another user's waits behind at most
    one of them (each user reaches the shared lock through a lock of their own)."""
    import threading
    import time

    from jobs.api.auth import Identity

    service, order, release = api.service, [], threading.Event()

    def compose(name: str, hold: bool = False) -> None:
        with service._composing(Identity(name)):
            order.append(name)
            if hold:
                release.wait(10)
            else:
                time.sleep(0.05)

    threads = [threading.Thread(target=compose, args=("alice", True))]
    threads += [threading.Thread(target=compose, args=("alice",)) for _ in range(4)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # alice's requests arrive first, in order
    bob = threading.Thread(target=compose, args=("bob",))
    bob.start()
    time.sleep(0.1)
    release.set()
    for thread in [*threads, bob]:
        thread.join(10)
    assert len(order) == 6 and order.index("bob") <= 2, order
