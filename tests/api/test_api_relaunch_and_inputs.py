"""Issue 43 items 4 and 5: every input path under the storage root follows the owner rule of
`trainer.resume_from`, and a run posted again follows the CLI's relaunch rule (jobs.relaunch)
on the record the cluster keeps of it (its ConfigMap)."""

from __future__ import annotations

import pytest
import yaml

from jobs.api.records import runs_named
from tests.api.conftest import NAMESPACE
from tests.api.test_api_boundary import refused
from tests.api.test_api_owners import s3_team
from tests.api.test_api_runs import wait_for

__all__ = ["s3_team"]


def _trainer_config(apiserver, run_id: str) -> dict:
    return yaml.safe_load(
        apiserver.get("configmaps", f"{run_id}-config", NAMESPACE)["data"]["config.yaml"]
    )


def test_another_users_run_is_no_input(s3_team, apiserver):
    """`model.init_from` naming another user's exported weights was a 201 while the same run
    through `trainer.resume_from` was a 403; every spelling of the run's dir is its."""
    api, users, s3, bucket = s3_team
    assert users["alice"].post("/v1/runs", json=api.run_request("src-i")).status_code == 201
    wait_for(lambda: users["alice"].get("/v1/runs/src-i").json()["state"] == "succeeded")
    root = f"s3://{bucket}/runs"
    s3.put_object(Bucket=bucket, Key="runs/src-i/export/config.json", Body=b"{}")
    cases = [
        ({"init_from": f"{root}/src-i/export"}, "model.init_from"),
        ({"init_from": f"{root}//src-i/export"}, "model.init_from"),
        ({"init_from": f"{root}/x/../src-i/export"}, "model.init_from"),
        ({"data": f"{root}/src-i/data.jsonl"}, "data.path"),
        ({"overrides": [f"data.tokenizer={root}/src-i/export"]}, "data.tokenizer"),
        (
            {
                "overrides": [
                    f"data.mixture=[{{path: '{root}/src-i/d', weight: 1}}]",
                    "data.path=null",
                ]
            },
            "data.mixture[0].path",
        ),
        ({"data": f"{root}/nobody/data.jsonl"}, "data.path"),  # a dir the cluster does not list
    ]
    for fields, key in cases:
        for dryrun in ("true", "false"):
            response = users["bob"].post(
                "/v1/runs", json=api.run_request("fork-i", **fields), params={"dryrun": dryrun}
            )
            assert response.status_code == 403, (fields, response.text)
            detail = response.json()["detail"]
            assert detail.startswith(f"{key}: run '"), detail
            assert "read only by its owner or an admin" in detail
    assert apiserver.get("pytorchjobs", "fork-i", NAMESPACE) is None
    for user in ("alice", "carol"):  # the owner, an admin: the owner rule lets them through
        request = api.run_request("fork-i", init_from=f"{root}/src-i/export")
        response = users[user].post("/v1/runs", json=request, params={"dryrun": "true"})
        assert response.status_code != 403, response.text


@pytest.mark.parametrize(
    ("path", "root", "named"),
    [
        ("s3://b/runs/x/y", "s3://b/runs", {"x"}),
        ("s3://b/runs//x", "s3://b/runs", {"x"}),
        ("s3://b//runs/x", "s3://b/runs", {"x"}),
        ("s3://b/runs/a/../x/m", "s3://b/runs", {"a", "x"}),
        ("s3://b/runs/./x", "s3://b/runs/", {"x"}),
        ("s3://b/runsx/y", "s3://b/runs", set()),
        ("s3://c/runs/x", "s3://b/runs", set()),
        ("s3://b/runs", "s3://b/runs", set()),
        ("/t/runs/a/../x", "/t/runs", {"a", "x"}),
        ("/t/other/x", "/t/runs", set()),
        ("/t/runs/../runs/x", "/t/runs", {"x"}),
    ],
)
def test_the_runs_an_input_path_names(path, root, named):
    assert runs_named(path, root) == named


def test_a_finished_run_posted_again_keeps_its_model_data_and_lr(api, apiserver):
    """A resubmitted finished run answered 201 "resumed" with another model, data and learning
    rate: the CLI's relaunch check never ran on the API's path."""
    first = api.run_request("rl1", trainer={"lr": 1e-3, "max_steps": 5})
    assert api.client.post("/v1/runs", json=first).status_code == 201
    wait_for(lambda: api.client.get("/v1/runs/rl1").json()["state"] == "succeeded")
    changes = [
        ({"trainer": {"lr": 3e-3}}, "trainer.lr"),
        ({"model": "llama3_1b"}, "model."),
        ({"data": "s3://stack-bucket/datasets/other.jsonl"}, "data.path"),
        ({"overrides": ["trainer.micro_batch_size=3"]}, "trainer.micro_batch_size"),
    ]
    for fields, key in changes:
        for dryrun in ("true", "false"):
            request = api.run_request("rl1", **fields)
            detail = refused(api.client.post("/v1/runs", json=request, params={"dryrun": dryrun}))
            assert detail.startswith(key) and "run rl1 was launched with" in detail, detail
            assert "a relaunch keeps the run's model, data and layout" in detail
    assert apiserver.operator.created["rl1"] == 1
    # What a relaunch may change (steps) it changes; the rest stays as recorded.
    again = api.run_request("rl1", trainer={"max_steps": 9})
    response = api.client.post("/v1/runs", json=again)
    assert response.status_code == 201 and response.json()["outcome"] == "resumed", response.text
    config = _trainer_config(apiserver, "rl1")
    assert config["trainer"]["max_steps"] == 9 and config["trainer"]["lr"] == 1e-3
    wait_for(lambda: api.client.get("/v1/runs/rl1").json()["state"] == "succeeded")
    same = api.client.post("/v1/runs", json=api.run_request("rl1"))  # nothing typed: as recorded
    assert same.status_code == 201 and same.json()["outcome"] == "resumed", same.text
    assert _trainer_config(apiserver, "rl1")["trainer"]["lr"] == 1e-3
    assert apiserver.operator.created["rl1"] == 3


def test_a_finished_sweep_point_posted_again_keeps_its_lr(api, apiserver):
    """The same rule for a sweep's points: re-using a sweep id resumed its finished points
    with the new values."""
    request = api.run_request("unused", axes={"trainer.lr": [1e-3, 2e-3]}, sweep_id="rsw")
    del request["run_id"]
    assert api.client.post("/v1/sweeps", json=request).status_code == 201
    wait_for(lambda: api.client.get("/v1/runs/rsw-1").json()["state"] == "succeeded")
    changed = {**request, "axes": {"trainer.lr": [1e-3, 5e-3]}}
    detail = refused(api.client.post("/v1/sweeps", json=changed))
    assert detail.startswith("sweep point 1 (") and "trainer.lr=0.005" in detail
    assert "trainer.lr: run rsw-1 was launched with 0.002" in detail, detail
    assert apiserver.operator.created["rsw-1"] == 1
    longer = {**request, "trainer": {"max_steps": 9}}
    response = api.client.post("/v1/sweeps", json=longer)
    assert response.status_code == 201, response.text
    assert {r["outcome"] for r in response.json()["runs"]} <= {"resumed", "already active"}
    assert _trainer_config(apiserver, "rsw-1")["trainer"]["lr"] == 2e-3
