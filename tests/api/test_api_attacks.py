"""A valid, non-admin token trying to get more than an approved job (issue 23, second pass):
Hydra grammar tricks, paths on the API's host, huge sweeps. Each is one 4xx line and nothing
reaches the cluster or the API's disk."""

from __future__ import annotations

import pytest

from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE
from tests.api.test_api_boundary import assert_nothing_happened, files_under, refused


@pytest.mark.parametrize(
    "override",
    [
        "trainer.lr='${oc.env:HOME}'",  # quoted
        'trainer.lr="${oc.env:HOME}"',
        "trainer.mixed_precision=[1,{a: '${oc.env:HOME}'}]",  # nested in a list's dict
        "trainer.mixed_precision={'${oc.env:HOME}': 1}",  # a dict key
        "trainer.lr=1,'${oc.env:HOME}'",  # a sweep value (refused as a sweep first)
        "++cluster.namespace=kube-system",
        "+cluster.namespace=kube-system",
        "~cluster",
        "~job.image_repository",
        "\uff43luster.namespace=kube-system",  # fullwidth c
        "model=\uff54iny",  # fullwidth t
        "model=tiny@backend",
        "trainer={max_steps: 1}",  # a group with a dict
        "job={image: docker.io/evil/img:1}",
        "hydra/launcher=basic",
        "hydra.job.chdir=true",
        "storage=local",
        "job.secrets={hf_token: {name: trainstack-api-token-hashes, key: sha}}",
        "job.image=docker.io/evil/img:1",
        "run_id=../../etc",
        "model.init_from=/etc",  # a path on the API's host: never read there
        "model.init_from=hf://org/name@main/../../../../tmp/x",  # the Hub cache's refs/<rev>
        "model.init_from=hf://org/..%2F..%2Fx",
        "model.init_from=hf://org/" + "n" * 300,
        "trainer.resume_from=/etc",
        "trainer.resume_from=../other-team",
        "trainer.resume_from=file:///etc",
        "storage.fsx=true",
        "storage.fsx_claim=other-teams-claim",
        "job.runtime=admin-privileged",  # job.api is the service's (pytorchjob): no runtime
        "job.api=trainjob",
        "data.path=/etc/passwd",
        "data.tokenizer=/root",
        "data.mixture=[{path: /etc/passwd, weight: 1.0}]",
        "storage.root=/etc",  # the API would read run dirs (metrics) there
        "storage.root=file:///etc",
        "job.termination_grace_period_seconds=999999999",  # a cancel would not free the GPUs
        "job.max_restarts=1000000000",  # a crashing job restarting without end
        "job.ttl_seconds_after_finished=999999999",
        "job.active_deadline_seconds=100000000000000000000",  # past int64: found by an attack pass
        "trainer.lr=" + "[" * 2000 + "]" * 2000,  # Hydra's parser recursed: a 500
        "trainer.lr=" + "[" * 200 + "]" * 200,
        "trainer.lr={a: " * 100 + "1" + "}" * 100,
    ],
)
def test_grammar_and_path_tricks_are_one_4xx_line(api, apiserver, tmp_path, override):
    before = files_under(tmp_path)
    request = api.run_request("atk2", overrides=[override])
    for key, field in (("job.image=", "image"), ("run_id=", "run_id")):
        if override.startswith(key):
            del request[field]  # the structured field would win over the override
    response = api.client.post("/v1/runs", json=request)
    assert 400 <= response.status_code < 500, response.text
    detail = response.json()["detail"]
    assert "\n" not in detail and "HOME" not in detail and str(tmp_path) not in detail
    assert_nothing_happened(api, apiserver, before, tmp_path)


def test_a_requests_storage_root_stays_under_the_services_or_on_s3(local_api, apiserver, tmp_path):
    """The service pins no storage root here (the README's local serve): a request's local
    root must still be under the service's own, never elsewhere on the API's host."""
    api = local_api
    outside = tmp_path.parent / "elsewhere"
    for root in (str(outside), f"{tmp_path}/runs/../../elsewhere", "/etc"):
        request = {**api.run_request("atk3"), "storage_root": root}
        detail = refused(api.client.post("/v1/runs", json=request))
        assert detail.startswith("storage.root: outside the service's storage root")
        assert root not in detail
    assert not outside.exists()
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
    inside = {**api.run_request("atk3"), "storage_root": str(tmp_path / "runs" / "team")}
    assert api.client.post("/v1/runs", json=inside, params={"dryrun": "true"}).status_code == 200
    # Finding 12: without the stack's grants the service reads no bucket a request names.
    on_s3 = {**api.run_request("atk3"), "storage_root": "s3://runs-bucket/runs"}
    detail = refused(api.client.post("/v1/runs", json=on_s3, params={"dryrun": "true"}))
    assert detail.startswith("storage.root: outside the service's storage root")


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.max_steps=range(0,1000000000)"],  # never expanded
        ["trainer.lr=range(0,1e308,1e-308)"],
        ["trainer.lr=1,2", "trainer.warmup_steps=range(0,129)"],  # 258
        [f"trainer.{k}=1,2" for k in ("lr", "warmup_steps", "max_steps", "seed_x")] * 1
        + [f"trainer.checkpoint.interval=range(1,{2**5})"],
    ],
)
def test_a_sweep_is_capped_at_256_points(api, apiserver, overrides):
    request = {"overrides": [f"compute={GPU_TYPE}", f"job.image={IMAGE}", *overrides]}
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert "more than 256 points; allowed: at most 256 per request" in detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.mark.parametrize("empty", ["range(1,1)", "range(1,0)", "range(0,10,-1)"])
def test_an_empty_sweep_axis_is_refused_not_a_sweep_of_nothing(api, apiserver, empty):
    """An axis with no value made the point count 0, which passed the cap for every other
    axis and answered 201 with no run (found by the attack pass)."""
    axes = [f"trainer.max_steps={empty}", "trainer.warmup_steps=range(0,256)"]
    request = {"overrides": [f"compute={GPU_TYPE}", f"job.image={IMAGE}", *axes]}
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert detail.startswith("trainer.max_steps: range() gives no value")
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_a_sweep_range_needs_a_step(api, apiserver):
    request = {"overrides": [f"compute={GPU_TYPE}", "trainer.max_steps=range(1,5,0)"]}
    assert refused(api.client.post("/v1/sweeps", json=request)).startswith("trainer.max_steps: ")


@pytest.mark.parametrize(
    "command",
    [
        ["--rdzv-endpoint=evil.example.com:29400", "python", "train.py"],  # torchrun's option
        ["--nproc-per-node=64", "python"],
        ["-m", "evil"],
    ],
)
def test_a_command_cannot_pass_options_to_the_launcher(api, apiserver, tmp_path, command):
    """Under torchrun the command follows the launcher's own options: a leading `-` would
    change the rendezvous or the process count rather than name the program."""
    before = files_under(tmp_path)
    request = api.run_request("atk4", runner="command", command=command)
    for dryrun in ("true", "false"):
        response = api.client.post("/v1/runs", json=request, params={"dryrun": dryrun})
        assert refused(response).startswith("runner.command: starts with an option")
    assert_nothing_happened(api, apiserver, before, tmp_path)


@pytest.fixture
def hung_hub(monkeypatch):
    """A Hub endpoint that accepts connections and never answers."""
    import socket

    import trainer.hf.hub

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setattr(trainer.hf.hub, "HUB_TIMEOUT_S", 1.0)
    yield
    listener.close()


def test_a_hung_hub_holds_up_neither_the_request_nor_anyone_elses(api, apiserver, hung_hub):
    """`model.init_from=hf://...` makes the API host ask the Hub at launch: a Hub that never
    answers costs that request a bounded wait and one 422 line, while other requests compose
    meanwhile (the composition lock is not held across the network)."""
    import threading
    import time

    answers = {}

    def hub_request():
        request = api.run_request("atk5", model="hf", init_from="hf://org/name@main")
        answers["hub"] = api.client.post("/v1/runs", json=request, params={"dryrun": "true"})
        answers["hub_done"] = time.monotonic() - started

    started = time.monotonic()
    waiting = threading.Thread(target=hub_request)
    waiting.start()
    time.sleep(0.3)  # the Hub request is composed and waiting on the Hub
    other = api.client.post("/v1/runs", json=api.run_request("atk6"), params={"dryrun": "true"})
    other_done = time.monotonic() - started
    waiting.join(timeout=60)
    assert other.status_code == 200, other.text
    detail = refused(answers["hub"])
    assert detail.startswith("model.init_from: hf://org/name@main: the Hub did not answer")
    assert other_done < answers["hub_done"]  # answered while the Hub request waited
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.fixture
def granted_api(kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch):
    """The service as a stack runs it: training pods may read and write s3://ours-bucket/runs/
    and nothing else (storage.grants)."""
    from tests.api.conftest import start_api

    monkeypatch.chdir(tmp_path)
    grants = "[{url: 's3://ours-bucket/runs/', access: readwrite}]"
    server, handle = start_api(
        kubeconfig, token_dir, tmp_path / "runs", overrides=(f"storage.grants.training={grants}",)
    )
    yield handle
    handle.client.close()
    server.stop()


@pytest.mark.parametrize(
    "fields",
    [
        {"model": "hf", "init_from": "s3://other-team/models/x"},  # config.json read at launch
        {"trainer": {"resume_from": "s3://other-team/runs/theirs"}},  # listed at launch
        {"trainer": {"resume_from": "s3://other-team/runs/theirs/checkpoints/step-00000001"}},
    ],
)
def test_the_api_host_reads_no_s3_url_outside_the_grants(granted_api, apiserver, fields):
    """A request's s3:// input outside the pods' grants is refused before the API host reads
    it with its own credentials (which may reach more than the pods')."""
    api = granted_api
    request = api.run_request("atk7", **fields)
    detail = refused(api.client.post("/v1/runs", json=request, params={"dryrun": "true"}))
    assert "outside the training pods' read grants" in detail, detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
