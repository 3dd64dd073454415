"""Every route of the Training API, walked from the app's own route table (issue 51): each one
but the health check and the sign-in form answers 401 without a token and 401 with a wrong
one; and each must be declared in ACCESS, so that a new route cannot ship without someone
saying who may call it. Where a route acts on a run or a sweep (owner or admin), another
user's token is refused with 403 on alice's; an admin-only route refuses a non-admin's."""

from __future__ import annotations

import httpx

from testing_support.k8s.fake_operator import JobPlan
from tests.api import test_api_owners as owners
from tests.api.conftest import GPU_TYPE, IMAGE
from tests.api.test_api_sessions_and_routes import declared_routes

team = owners.team

USER = "any user"
"""Any user's token (or, for reads, a dashboard session)."""
OWNER_OR_ADMIN = "owner or admin"
"""Any user's token, but on another user's run or sweep only an admin's."""
ADMIN = "admin"
"""An admin's token only (`trainstack serve --admin NAME`)."""
ACCESS = {
    ("POST", "/v1/runs"): OWNER_OR_ADMIN,  # resubmitting a run id or a sweep's: its owner's
    ("POST", "/v1/sweeps"): OWNER_OR_ADMIN,
    ("DELETE", "/v1/runs/{run_id}"): OWNER_OR_ADMIN,
    ("GET", "/v1/runs"): USER,
    ("GET", "/v1/runs/{run_id}"): USER,
    ("GET", "/v1/runs/{run_id}/metrics"): USER,
    ("GET", "/v1/runs/{run_id}/logs"): USER,
    ("GET", "/v1/runs/{run_id}/evals"): USER,
    ("GET", "/openapi.json"): USER,
    ("GET", "/docs"): USER,
    ("GET", "/"): USER,
    ("GET", "/runs/{run_id}"): USER,
    ("GET", "/sweeps/{sweep_id}"): USER,
    ("GET", "/ui/figure"): USER,
}
"""Who may call each route (method, path as declared): every route the app has but PUBLIC."""
SWEEP = {"overrides": [f"compute={GPU_TYPE}", f"job.image={IMAGE}", "seed=1,2"]}
ALICES = {"run_id": "alices", "sweep_id": "als"}
"""alice's run and sweep, which the owner-or-admin routes are asked to act on by bob."""


def route_table(app) -> dict[tuple[str, str], str]:
    """(method, declared path) -> the path with its parameters filled with alice's objects,
    of every route the app has (HEAD aside) but the public ones."""
    found = {}
    for method, declared in declared_routes(app):
        path = declared
        for name, value in ALICES.items():
            path = path.replace(f"{{{name}}}", value)
        found[(method, declared)] = path
    return found


def foreign_request(api, method: str, path: str) -> dict:
    """bob's request on alice's run or sweep through an owner-or-admin route."""
    if (method, path) == ("POST", "/v1/runs"):
        return {"json": api.run_request(ALICES["run_id"])}
    if (method, path) == ("POST", "/v1/sweeps"):
        return {"json": {**SWEEP, "sweep_id": ALICES["sweep_id"]}}
    return {}


def test_every_route_is_declared_and_refuses_no_token_a_wrong_one_and_other_users(team, apiserver):
    from jobs.api.app import create_app

    api, users = team
    routes = route_table(create_app(api.service, None))
    assert set(routes) == set(ACCESS), "declare each new route's access in ACCESS"
    for (method, _), path in sorted(routes.items()):
        for headers in ({}, {"Authorization": "Bearer ts-wrong-0123456789abcdef"}):
            sent = httpx.request(method, f"{api.url}{path}", json={}, headers=headers)
            assert sent.status_code == 401, (method, path, headers, sent.text[:200])

    apiserver.operator.default = JobPlan(hold=True)
    created = users["alice"].post("/v1/runs", json=api.run_request(ALICES["run_id"]))
    assert created.status_code == 201, created.text
    swept = users["alice"].post("/v1/sweeps", json={**SWEEP, "sweep_id": ALICES["sweep_id"]})
    assert swept.status_code == 201, swept.text
    api.service.snapshot.invalidate()
    for (method, declared), path in sorted(routes.items()):
        if ACCESS[(method, declared)] == USER:
            continue
        sent = users["bob"].request(method, path, **foreign_request(api, method, declared))
        assert sent.status_code == 403, (method, path, sent.text[:200])
        assert "belongs to alice" in sent.json()["detail"] or ACCESS[(method, declared)] == ADMIN
    assert apiserver.operator.created[ALICES["run_id"]] == 1  # nothing bob sent went through
