"""Every route needs a token; browser sessions are random ids with an expiry, never the token;
sign-ins are rate-limited; a broken token Secret revokes; only allowed Host names are served;
the docs are behind the token with Swagger UI's assets served by the app; HTTPS end to end."""

from __future__ import annotations

import logging
import re
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from tests.api.conftest import TOKEN
from tests.api.server import ServerThread
from tests.api.test_api_auth_and_cluster import sign_in

PUBLIC = {"/healthz", "/login"}
"""Answer without a token: the probes' health and the sign-in form."""
ASSET_MOUNTS = {"/static", "/docs-assets"}
"""Files of the dashboard and of Swagger UI (public code, no data): needed before sign-in."""


def declared_routes(app) -> list[tuple[str, str]]:
    """(method, path as declared) of every route the app has but the public ones, HEAD aside;
    a mount must be one of the asset mounts."""
    found = []
    for route in app.routes:
        if isinstance(route, Mount):
            assert route.path in ASSET_MOUNTS, f"a new mount {route.path}: is it public?"
            continue
        assert isinstance(route, APIRoute | Route), route
        if route.path in PUBLIC:
            continue
        found += [(method, route.path) for method in sorted(route.methods - {"HEAD"})]
    return found


def routes_of(app) -> list[tuple[str, str]]:
    """(method, path with its parameters filled) of every route the app has, HEAD aside."""
    return [(method, re.sub(r"\{[^}]+\}", "x", path)) for method, path in declared_routes(app)]


def test_every_route_refuses_no_token_and_a_cookie_on_writes(api):
    from jobs.api.app import create_app

    routes = routes_of(create_app(api.service, None))
    # The app's own list, not a hand-kept one: these are only the ones known today.
    assert {("POST", "/v1/runs"), ("POST", "/v1/sweeps"), ("DELETE", "/v1/runs/x")} <= set(routes)
    assert {("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/ui/figure")} <= set(routes)
    session = {"trainstack_session": sign_in(api.url)}
    for method, path in routes:
        bare = httpx.request(method, f"{api.url}{path}", json={})
        assert bare.status_code == 401, (method, path, bare.status_code, bare.text[:200])
        if method != "GET":
            with_cookie = httpx.request(method, f"{api.url}{path}", json={}, cookies=session)
            assert with_cookie.status_code == 401, (method, path, with_cookie.text[:200])
    assert httpx.get(f"{api.url}/healthz").status_code == 200


def test_the_session_cookie_is_a_random_id_never_the_token(api):
    response = httpx.post(f"{api.url}/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303
    header = response.headers["set-cookie"]
    session = response.cookies["trainstack_session"]
    assert TOKEN not in header and len(session) >= 40
    assert "HttpOnly" in header and "SameSite=strict" in header and "Max-Age=43200" in header
    assert sign_in(api.url) != session  # a new id per sign-in
    cookies = {"trainstack_session": session}
    assert httpx.get(f"{api.url}/v1/runs", cookies=cookies).status_code == 200
    page = httpx.get(f"{api.url}/", cookies=cookies)
    assert page.status_code == 200 and ('id="runs"' in page.text or "no runs yet" in page.text)
    # Without a session a page is the sign-in form (401) that brings the browser back.
    form = httpx.get(f"{api.url}/runs/r1")
    assert form.status_code == 401 and 'name="next" value="/runs/r1"' in form.text


def test_sessions_expire():
    from jobs.api.sessions import Sessions

    now = [1000.0]
    sessions = Sessions(ttl_s=60, clock=lambda: now[0])
    session = sessions.create("hash")
    assert sessions.token_hash(session) == "hash"
    now[0] += 61
    assert sessions.token_hash(session) is None
    assert sessions.token_hash("made-up") is None and sessions.token_hash(None) is None


def test_a_revoked_token_ends_its_sessions(tmp_path: Path):
    from jobs.api.auth import TokenHashes, token_hash
    from jobs.api.sessions import Sessions

    (tmp_path / "alice").write_text(token_hash(TOKEN))
    tokens = TokenHashes(tmp_path, reload_s=0.0)
    sessions = Sessions()
    session = sessions.create(token_hash(TOKEN))
    assert tokens.identify_hash(sessions.token_hash(session)).name == "alice"
    (tmp_path / "alice").unlink()
    assert tokens.identify_hash(sessions.token_hash(session)) is None


def test_sign_ins_are_rate_limited_per_client(api):
    for _ in range(10):
        wrong = httpx.post(f"{api.url}/login", data={"token": "guess", "next": "/"})
        assert wrong.status_code == 401
    limited = httpx.post(f"{api.url}/login", data={"token": TOKEN, "next": "/"})
    assert limited.status_code == 429 and "too many sign-in attempts" in limited.text
    assert int(limited.headers["retry-after"]) >= 1
    # The API itself is not limited by the form: bearer tokens go on working.
    assert api.client.get("/v1/runs").status_code == 200


def test_a_garbage_hash_file_revokes_and_is_logged(tmp_path: Path, caplog):
    from jobs.api.auth import TokenHashes, token_hash

    (tmp_path / "ci").write_text(token_hash(TOKEN))
    tokens = TokenHashes(tmp_path, reload_s=0.0)
    assert tokens.check(TOKEN)
    (tmp_path / "ci").write_text("not a hash at all")
    with caplog.at_level(logging.ERROR, logger="jobs.api.auth"):
        assert not tokens.check(TOKEN)
    assert "every token refused" in caplog.text and "'ci'" in caplog.text
    assert TOKEN not in caplog.text
    (tmp_path / "ci").write_text(token_hash(TOKEN))
    assert tokens.check(TOKEN)  # fixed: back


def test_hash_token_refuses_short_tokens(capsys, monkeypatch):
    import io

    from jobs.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("x" * 31 + "\n"))
    assert main(["serve", "--hash-token"]) == 2
    assert "31 characters; at least 32" in capsys.readouterr().err


def test_only_allowed_hosts_are_served(api):
    from jobs.api.app import create_app
    from jobs.commands.serve import allowed_hosts_for

    assert allowed_hosts_for("127.0.0.1", None) == ["127.0.0.1", "localhost", "::1"]
    assert allowed_hosts_for("0.0.0.0", None) == ["*"]
    assert allowed_hosts_for("0.0.0.0", "api.internal, x.example") == ["api.internal", "x.example"]
    server = ServerThread(create_app(api.service, None, allowed_hosts=["127.0.0.1"])).start()
    try:
        assert httpx.get(f"{server.url}/v1/runs").status_code == 200
        rebound = httpx.get(f"{server.url}/v1/runs", headers={"Host": "attacker.example"})
        assert rebound.status_code == 400
        assert httpx.get(f"{server.url}/", headers={"Host": "attacker.example"}).status_code == 400
        probe = httpx.get(f"{server.url}/healthz", headers={"Host": "10.0.3.7:8080"})
        assert probe.status_code == 200  # the kubelet names the pod's IP
    finally:
        server.stop()


def test_docs_are_behind_the_token_and_need_no_cdn(api):
    assert httpx.get(f"{api.url}/docs").status_code == 401
    assert httpx.get(f"{api.url}/openapi.json").status_code == 401
    page = api.client.get("/docs")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/") for s in sources), sources
    assert "https://" not in page.text and "http://" not in page.text
    for source in sources:
        asset = httpx.get(f"{api.url}{source}")
        assert asset.status_code == 200 and len(asset.content) > 500, source
    # A browser signed in to the dashboard reads them with its session.
    session = {"trainstack_session": sign_in(api.url)}
    assert httpx.get(f"{api.url}/openapi.json", cookies=session).status_code == 200


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_serve_speaks_https_and_marks_its_cookie_secure(kubeconfig, tmp_path):
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    openssl += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        [*openssl, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True
    )
    port = _free_port()
    command = [sys.executable, "-m", "jobs.cli", "serve", "--no-auth", "--port", str(port)]
    command += ["--tls-cert", str(cert), "--tls-key", str(key), f"cluster.kubeconfig={kubeconfig}"]
    server = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"https://127.0.0.1:{port}"
    trust = ssl.create_default_context(cafile=str(cert))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", verify=trust).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, server.stdout.read()
            time.sleep(0.2)
        signed = httpx.post(f"{url}/login", data={"token": "", "next": "/"}, verify=trust)
        assert signed.status_code == 303
        assert "Secure" in signed.headers["set-cookie"]
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)  # no plain HTTP
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()


def test_a_forwarded_for_header_does_not_reset_the_sign_in_limit(api):
    """Finding 13: uvicorn trusted X-Forwarded-For from loopback, so one client got a fresh
    limit per made-up address. The service runs with SERVER_OPTIONS (no proxy headers)."""
    for index in range(10):
        headers = {"X-Forwarded-For": f"10.0.0.{index}"}
        wrong = httpx.post(
            f"{api.url}/login", data={"token": "guess", "next": "/"}, headers=headers
        )
        assert wrong.status_code == 401
    again = httpx.post(
        f"{api.url}/login",
        data={"token": TOKEN, "next": "/"},
        headers={"X-Forwarded-For": "10.9.9.9", "Forwarded": "for=10.9.9.9"},
    )
    assert again.status_code == 429


def test_one_tokens_sign_ins_evict_only_its_own_sessions():
    """Finding 13: 10,500 sign-ins by one client evicted everyone's sessions."""
    from jobs.api.auth import token_hash
    from jobs.api.sessions import MAX_SESSIONS_PER_TOKEN, Sessions

    sessions = Sessions(max_sessions=100)
    bobs = sessions.create(token_hash("bob-token"))
    flood = [sessions.create(token_hash(TOKEN)) for _ in range(10_500)]
    assert sessions.token_hash(bobs) == token_hash("bob-token")
    alive = [s for s in flood if sessions.token_hash(s) is not None]
    assert alive == flood[-MAX_SESSIONS_PER_TOKEN:]
    assert sum(len(ids) for ids in sessions._of_token.values()) <= 2 * MAX_SESSIONS_PER_TOKEN
