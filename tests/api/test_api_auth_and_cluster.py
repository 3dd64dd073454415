"""Bearer tokens (hashed at rest, rotation), an unreachable cluster, shared cluster reads, and
the OpenAPI schema checked into docs/."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import OLD_TOKEN, TOKEN, start_api

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_tokens_are_required_checked_and_never_logged(api, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    bare = httpx.get(f"{api.url}/v1/runs")
    assert bare.status_code == 401
    assert bare.headers["www-authenticate"] == "Bearer"
    assert bare.json() == {"detail": "missing or wrong bearer token"}
    wrong = httpx.get(f"{api.url}/v1/runs", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    basic = httpx.get(f"{api.url}/v1/runs", headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status_code == 401
    assert httpx.post(f"{api.url}/v1/runs", json={}).status_code == 401
    assert httpx.delete(f"{api.url}/v1/runs/x").status_code == 401
    # Both tokens of a rotation work; health needs none.
    for token in (TOKEN, OLD_TOKEN):
        ok = httpx.get(f"{api.url}/v1/runs", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200, ok.text
    assert httpx.get(f"{api.url}/healthz").json() == {"status": "ok"}
    # A dashboard session authorizes reads, never writes; the token itself is no cookie.
    cookies = {"trainstack_session": sign_in(api.url)}
    assert httpx.get(f"{api.url}/v1/runs", cookies=cookies).status_code == 200
    assert httpx.post(f"{api.url}/v1/runs", json={}, cookies=cookies).status_code == 401
    as_cookie = {"trainstack_session": TOKEN}
    assert httpx.get(f"{api.url}/v1/runs", cookies=as_cookie).status_code == 401
    out, err = capfd.readouterr()
    for token in (TOKEN, OLD_TOKEN, "not-the-token"):
        assert token not in caplog.text + out + err


def sign_in(url: str, token: str = TOKEN) -> str:
    """The session id the sign-in form sets."""
    response = httpx.post(f"{url}/login", data={"token": token, "next": "/"})
    assert response.status_code == 303, response.text
    return response.cookies["trainstack_session"]


def test_the_secret_holds_hashes_only(tmp_path: Path):
    from jobs.api.auth import TokenConfigError, TokenHashes

    (tmp_path / "plain").write_text(TOKEN)
    with pytest.raises(TokenConfigError, match=r"'plain'.*not a SHA-256 hex digest"):
        TokenHashes(tmp_path)


def test_rotation_is_picked_up_without_a_restart(tmp_path: Path):
    from jobs.api.auth import TokenHashes, token_hash

    (tmp_path / "a").write_text(token_hash("first"))
    tokens = TokenHashes(tmp_path, reload_s=0.0)
    assert tokens.check("first") and not tokens.check("second")
    (tmp_path / "b").write_text(token_hash("second"))
    (tmp_path / "a").unlink()
    assert tokens.check("second") and not tokens.check("first")


def test_an_unreachable_cluster_is_503_with_one_line(
    apiserver, kubeconfig, fast_retry, fast_restarts, token_dir, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the service's storage root (runs) holds the run dirs
    dead = tmp_path / "dead-kubeconfig"
    closed_port = apiserver.url.rsplit(":", 1)[1]
    dead.write_text(kubeconfig.read_text().replace(closed_port, "1"))  # nothing listens on :1
    server, api = start_api(dead, token_dir, tmp_path / "runs")
    try:
        for path in ("/v1/runs", "/v1/runs/any"):
            response = api.client.get(path)
            assert response.status_code == 503, response.text
            detail = response.json()["detail"]
            assert "\n" not in detail and "list PyTorchJobs in training failed" in detail
        post = api.client.post("/v1/runs", json=api.run_request("u1"))
        assert post.status_code == 503 and "\n" not in post.json()["detail"]
        assert api.client.get("/healthz").status_code == 200
    finally:
        api.client.close()
        server.stop()


def test_many_polling_clients_share_about_one_list_per_second(api, apiserver):
    """The short version of benchmarks/bench_api.py: 16 clients poll as fast as they can
    (asyncio tasks in one thread, so the clients do not starve the server of the GIL)."""
    import asyncio

    assert api.client.post("/v1/runs", json=api.run_request("p1")).status_code == 201
    lists_before = apiserver.count("GET", "/pytorchjobs?")
    seconds, answered, errors = 3.0, [], []

    async def poll(client: httpx.AsyncClient, stop: float) -> None:
        while time.monotonic() < stop:
            for path in ("/v1/runs", "/v1/runs/p1"):
                response = await client.get(path)
                (answered if response.status_code == 200 else errors).append(path)

    async def main() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=api.url, headers=headers, timeout=30) as client:
            stop = time.monotonic() + seconds
            await asyncio.gather(*(poll(client, stop) for _ in range(16)))

    asyncio.run(main())
    lists = apiserver.count("GET", "/pytorchjobs?") - lists_before
    assert not errors
    assert lists <= seconds / api.service.snapshot.ttl_s + 2, (lists, len(answered))
    assert len(answered) >= 4 * lists  # answers were shared, not one LIST each


def test_openapi_schema_is_served_and_checked_in(api):
    served = api.client.get("/openapi.json").json()
    assert set(served["paths"]) >= {
        "/healthz",
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/metrics",
        "/v1/runs/{run_id}/logs",
        "/v1/sweeps",
    }
    assert served["components"]["schemas"]["RunRequest"]["additionalProperties"] is False
    assert json.loads(OPENAPI.read_text()) == served, (
        "docs/openapi.json is stale: run `python -m jobs.api.openapi > docs/openapi.json`"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["serve"],
            "--token-hashes DIR (or $TRAINSTACK_API_TOKEN_HASHES) is required; or --no-auth",
        ),
        (["serve", "--no-auth", "--host", "0.0.0.0"], "--no-auth listens on loopback only"),
        (["serve", "--token-hashes", "/nonexistent"], "/nonexistent is not a directory"),
    ],
)
def test_serve_refuses_to_start_without_auth_off_loopback(argv, message, capsys, monkeypatch):
    from jobs.cli import main

    monkeypatch.delenv("TRAINSTACK_API_TOKEN_HASHES", raising=False)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_hash_token_prints_the_sha256_only(capsys, monkeypatch):
    import hashlib
    import io

    from jobs.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("my-token-0123456789abcdef0123456789\n"))
    assert main(["serve", "--hash-token"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == hashlib.sha256(b"my-token-0123456789abcdef0123456789").hexdigest()
    )


def test_serve_without_the_stack_file_says_how_to_write_it(capsys, monkeypatch, tmp_path):
    from jobs.cli import main

    monkeypatch.setenv("TRAINSTACK_CONFIG_PATH", str(tmp_path / "conf"))
    assert main(["serve", "--no-auth", "stack=dev"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "stack: no stack file 'dev'" in err
    assert "`python -m infra.stack_defaults --stack dev` after `pulumi up`" in err
    assert str(tmp_path / "conf" / "stack") in err
