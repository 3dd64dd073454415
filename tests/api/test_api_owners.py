"""Who did what (issue 23, items 4 and 5): each token is a user's, runs carry their owner,
others' runs cannot be cancelled or resumed unless the token is an admin's, and nothing the
service does not own is touched."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE, TOKEN, USER, start_api
from tests.api.test_api_runs import wait_for
from tests.k8s.test_k8s_foreign_objects import foreign_config_map, foreign_job, unchanged

BOB, CAROL = "ts-bob-0123456789abcdef0123456789", "ts-carol-0123456789abcdef01234567"


@pytest.fixture
def team(kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch):
    """alice (the conftest's tokens), bob, and carol the admin, on one service."""
    from jobs.api.auth import token_hash

    monkeypatch.chdir(tmp_path)
    (token_dir / "team").write_text(f"{token_hash(BOB)} bob\n{token_hash(CAROL)} carol\n")
    server, alice = start_api(kubeconfig, token_dir, tmp_path / "runs", admins=("carol",))
    clients = {"alice": alice.client}
    for name, token in (("bob", BOB), ("carol", CAROL)):
        clients[name] = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
    yield alice, clients
    for client in clients.values():
        client.close()
    server.stop()


def test_runs_carry_their_owner_and_only_the_owner_or_an_admin_cancels(team, apiserver):
    api, users = team
    for run_id in ("own-a", "own-b"):
        apiserver.operator.plans[run_id] = [JobPlan(hold=True)]
    assert users["alice"].post("/v1/runs", json=api.run_request("own-a")).status_code == 201
    assert users["bob"].post("/v1/runs", json=api.run_request("own-b")).status_code == 201
    labels = apiserver.get("pytorchjobs", "own-a", NAMESPACE)["metadata"]["labels"]
    assert labels["trainstack.io/owner"] == USER

    def mine(user: str) -> list[str]:
        runs = users[user].get("/v1/runs", params={"owner": "me"}).json()["runs"]
        return sorted(r["run_id"] for r in runs)

    assert (mine("alice"), mine("bob"), mine("carol")) == (["own-a"], ["own-b"], [])
    everyone = users["carol"].get("/v1/runs").json()["runs"]
    assert {r["run_id"]: r["owner"] for r in everyone} == {"own-a": USER, "own-b": "bob"}
    by_name = users["carol"].get("/v1/runs", params={"owner": "bob"}).json()["runs"]
    assert [r["run_id"] for r in by_name] == ["own-b"]

    wait_for(lambda: users["alice"].get("/v1/runs/own-a").json()["state"] == "running")
    refused = users["bob"].delete("/v1/runs/own-a")
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        f"run 'own-a' belongs to {USER}; only its owner or an admin may cancel it"
    )
    again = users["bob"].post("/v1/runs", json=api.run_request("own-a"))
    assert again.status_code == 403 and "belongs to alice" in again.json()["detail"]
    assert users["alice"].get("/v1/runs/own-a").json()["state"] == "running"
    assert apiserver.operator.created["own-a"] == 1

    assert users["alice"].delete("/v1/runs/own-a").status_code == 202
    assert users["carol"].delete("/v1/runs/own-b").status_code == 202  # the admin
    wait_for(lambda: users["bob"].get("/v1/runs/own-b").json()["state"] == "cancelled")


def test_the_api_never_touches_foreign_objects(api, apiserver):
    config_map = foreign_config_map(apiserver, "payroll-config")
    response = api.client.post("/v1/runs", json=api.run_request("payroll"))
    assert response.status_code == 409
    assert response.json()["detail"].startswith(
        f"ConfigMap {NAMESPACE}/payroll-config exists and is not managed by trainstack"
    )
    assert unchanged(apiserver, "configmaps", config_map)
    assert apiserver.get("pytorchjobs", "payroll", NAMESPACE) is None

    job = foreign_job(apiserver, "teamb-eval")
    response = api.client.post("/v1/runs", json=api.run_request("teamb-eval"))
    assert response.status_code == 409 and "PyTorchJob" in response.json()["detail"]
    assert unchanged(apiserver, "pytorchjobs", job)  # uid and image as they were
    # Not ours: not listed, so not cancellable either.
    assert api.client.delete("/v1/runs/teamb-eval").status_code == 404
    assert unchanged(apiserver, "pytorchjobs", job)


def test_token_files_map_hashes_to_users(tmp_path: Path):
    from jobs.api.auth import Identity, TokenConfigError, TokenHashes, token_hash

    (tmp_path / "ci-bot").write_text(token_hash("old-format-token") + "\n")  # a bare hash
    (tmp_path / "team").write_text(
        f"# hash user\nsha256:{token_hash('t-alice')} alice\n{token_hash('t-root')} root\n"
    )
    tokens = TokenHashes(tmp_path, admins=("root",))
    assert tokens.identify("old-format-token") == Identity("ci-bot")  # the key names the user
    assert tokens.identify("t-alice") == Identity("alice")
    assert tokens.identify("t-root") == Identity("root", admin=True)
    assert tokens.identify("nope") is None and tokens.identify(TOKEN) is None
    (tmp_path / "bad").write_text(f"{token_hash('x')} not/a label\n")
    with pytest.raises(TokenConfigError, match=r"'bad'.*user 'not/a label' is not a label value"):
        TokenHashes(tmp_path)


def test_a_sweep_is_its_owners(team, apiserver):
    """Finding 9: bob cannot add runs to alice's sweep, nor take the run id of one of its
    future points, so her resubmission of it (with more points) still goes through."""
    api, users = team
    apiserver.operator.default = JobPlan(hold=True)
    sweep = {"overrides": [f"compute={GPU_TYPE}", f"job.image={IMAGE}", "seed=1,2"]}
    assert users["alice"].post("/v1/sweeps", json={**sweep, "sweep_id": "als"}).status_code == 201
    api.service.snapshot.invalidate()
    for request in (
        api.run_request("bob-1", overrides=["sweep_id=als"]),  # into her sweep
        api.run_request("als-2"),  # a point her next resubmission makes
    ):
        refused = users["bob"].post("/v1/runs", json=request)
        assert refused.status_code == 403, refused.text
        assert "sweep 'als' belongs to alice" in refused.json()["detail"]
    bobs = users["bob"].post("/v1/sweeps", json={**sweep, "sweep_id": "als"})
    assert bobs.status_code == 403
    assert apiserver.get("pytorchjobs", "bob-1", NAMESPACE) is None
    assert apiserver.get("pytorchjobs", "als-2", NAMESPACE) is None
    more = {**sweep, "overrides": [*sweep["overrides"][:2], "seed=1,2,3"], "sweep_id": "als"}
    again = users["alice"].post("/v1/sweeps", json=more)
    assert again.status_code == 201, again.text
    assert [r["outcome"] for r in again.json()["runs"]] == ["already active"] * 2 + ["created"]
    # An admin may (carol acts for the team).
    carols = users["carol"].post(
        "/v1/runs", json=api.run_request("c-1", overrides=["sweep_id=als"])
    )
    assert carols.status_code == 201, carols.text


@pytest.mark.parametrize("manager", ["Helm", "argocd", "Trainstack", "trainstack-old"])
def test_an_object_another_tool_manages_is_not_trainstacks(api, apiserver, manager):
    """Only app.kubernetes.io/managed-by=trainstack makes an object ours: Helm's or Argo's
    label (or a near miss) is someone else's, left exactly as it is."""
    from jobs.backends.kubernetes.client.ownership import MANAGED_BY

    job = foreign_job(apiserver, "helm-job")
    job["metadata"]["labels"][MANAGED_BY] = manager
    job = apiserver.put("pytorchjobs", job, NAMESPACE)
    config_map = foreign_config_map(apiserver, "helm-cm-config")
    config_map["metadata"]["labels"][MANAGED_BY] = manager
    config_map = apiserver.put("configmaps", config_map, NAMESPACE)
    for run_id, kind in (("helm-job", "PyTorchJob"), ("helm-cm", "ConfigMap")):
        response = api.client.post("/v1/runs", json=api.run_request(run_id))
        assert response.status_code == 409, response.text
        assert response.json()["detail"].startswith(f"{kind} {NAMESPACE}/")
    assert unchanged(apiserver, "pytorchjobs", job)
    assert unchanged(apiserver, "configmaps", config_map)
    assert apiserver.get("pytorchjobs", "helm-cm", NAMESPACE) is None


def test_another_user_cannot_resubmit_a_finished_run(team, apiserver):
    """A finished run resumes from its checkpoints on a POST with its run_id: only for its
    owner or an admin (bob would train on, and write into, alice's run)."""
    api, users = team
    assert users["alice"].post("/v1/runs", json=api.run_request("fin-a")).status_code == 201
    wait_for(lambda: users["alice"].get("/v1/runs/fin-a").json()["state"] == "succeeded")
    for dryrun in ("false",):
        again = users["bob"].post(
            "/v1/runs", json=api.run_request("fin-a"), params={"dryrun": dryrun}
        )
        assert again.status_code == 403, again.text
        assert "belongs to alice" in again.json()["detail"]
    assert apiserver.operator.created["fin-a"] == 1
    labels = apiserver.get("pytorchjobs", "fin-a", NAMESPACE)["metadata"]["labels"]
    assert labels["trainstack.io/owner"] == USER
    resumed = users["alice"].post("/v1/runs", json=api.run_request("fin-a"))
    assert resumed.status_code == 201 and resumed.json()["outcome"] == "resumed"


@pytest.fixture
def s3_team(
    kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch, s3_direct, s3_bucket
):
    """The team on a service whose storage root is the stack's bucket (moto), as deployed."""
    from jobs.api.auth import token_hash

    monkeypatch.chdir(tmp_path)
    (token_dir / "team").write_text(f"{token_hash(BOB)} bob\n{token_hash(CAROL)} carol\n")
    root = f"s3://{s3_bucket}/runs"
    server, alice = start_api(kubeconfig, token_dir, root, admins=("carol",))
    clients = {"alice": alice.client}
    for name, token in (("bob", BOB), ("carol", CAROL)):
        clients[name] = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
    yield alice, clients, s3_direct.client(), s3_bucket
    for client in clients.values():
        client.close()
    server.stop()


def test_a_runs_checkpoints_are_forked_only_by_its_owner(s3_team, apiserver):
    """Finding 11, decided: `trainer.resume_from=<run>` forks that run's weights (trained on
    data its owner may read and others may not), so only the run's owner or an admin may
    name it, and only while the cluster lists the run (README, threat model)."""
    api, users, s3, bucket = s3_team
    assert users["alice"].post("/v1/runs", json=api.run_request("src-a")).status_code == 201
    wait_for(lambda: users["alice"].get("/v1/runs/src-a").json()["state"] == "succeeded")
    for run in ("src-a", "gone"):  # gone: a run dir the cluster no longer lists
        step = f"runs/{run}/checkpoints/step-00000004"
        s3.put_object(Bucket=bucket, Key=f"{step}/.metadata", Body=b"metadata")
        s3.put_object(Bucket=bucket, Key=f"{step}/COMMITTED", Body=b"4\n")
    api.service.snapshot.invalidate()
    for source in ("src-a", "src-a/step-4", "gone", f"s3://{bucket}/runs/src-a"):
        request = api.run_request("fork-b", trainer={"resume_from": source})
        refused = users["bob"].post("/v1/runs", json=request)
        assert refused.status_code == 403, refused.text
        assert refused.json()["detail"].startswith("trainer.resume_from: run '")
    assert apiserver.get("pytorchjobs", "fork-b", NAMESPACE) is None
    own = api.run_request("fork-a", trainer={"resume_from": "src-a/step-4"})
    mine = users["alice"].post("/v1/runs", json=own, params={"dryrun": "true"})
    assert mine.status_code == 200, mine.text
    admin = api.run_request("fork-c", trainer={"resume_from": "gone"})
    assert users["carol"].post("/v1/runs", json=admin, params={"dryrun": "true"}).status_code == 200
