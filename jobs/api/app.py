"""The HTTP face of the Training API (FastAPI): routes, auth, limits and one-line errors.

`create_app(service, tokens)`; `trainstack serve` runs it under uvicorn. Every error body is
`{"detail": "<one line>"}`: 401 no or wrong token, 403 another user's run, 404 unknown run,
413 body over the limit, 400 malformed JSON, 422 bad input (the CLI's message), 409 conflict
(an object trainstack does not own, or an existing run), 503 cluster unreachable. Error lines
never carry the service's own settings (bucket, registry, account id).
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from jobs.api.auth import Identity, TokenHashes
from jobs.api.models import (
    Cancelled,
    Metrics,
    Problem,
    Run,
    RunList,
    RunRequest,
    Submitted,
    SweepRequest,
    SweepSubmitted,
)
from jobs.api.service import ApiError, Service, to_run
from jobs.backends.base import STATES

MAX_BODY_BYTES = 64 * 1024
"""Requests are a few hundred bytes; anything near this is a mistake or an attack."""
SESSION_COOKIE = "trainstack_token"
"""The dashboard's login cookie (HttpOnly, SameSite=Strict); accepted for GET requests only."""
TITLE = "trainstack Training API"
BEARER = HTTPBearer(auto_error=False, description="a token whose SHA-256 is in the Secret")
ERRORS = {code: {"model": Problem} for code in (400, 401, 403, 404, 409, 413, 422, 503)}


class BodyLimit:
    """413 for bodies over `max_bytes`, by Content-Length or as a chunked body streams in."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await _too_large(self.max_bytes, send)
        seen, refused = 0, False

        async def limited():
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes and not refused:
                refused = True
                await _too_large(self.max_bytes, send)
                return {"type": "http.disconnect"}  # the app stops reading; its answer is dropped
            return message

        async def guarded_send(message):
            if not refused:
                await send(message)

        await self.app(scope, limited, guarded_send)


async def _too_large(limit: int, send) -> None:
    body = json.dumps({"detail": f"request body over {limit} bytes"}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def validation_line(exc: RequestValidationError, request: Request) -> tuple[int, str]:
    """The first problem as `<field>: <what is wrong>`; malformed JSON is 400."""
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    if error.get("type") == "json_invalid":
        return 400, f"body: malformed JSON ({(error.get('ctx') or {}).get('error', 'invalid')})"
    if error.get("type") == "extra_forbidden":
        model = SweepRequest if request.url.path.startswith("/v1/sweeps") else RunRequest
        allowed = ", ".join(model.model_fields)
        return 422, f"{where}: unknown field; allowed: {allowed}"
    return 422, f"{where}: {error.get('msg', 'invalid')}"


async def authorized(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Identity:
    """The token's user (the app's `tokens`; None: `--no-auth`, the service's own user)."""
    tokens: TokenHashes | None = request.app.state.tokens
    if tokens is None:
        return request.app.state.service.anonymous
    who = tokens.identify(credentials.credentials) if credentials is not None else None
    if who is None and request.method == "GET":
        who = tokens.identify(request.cookies.get(SESSION_COOKIE))
    if who is not None:
        return who
    raise ApiError(401, "missing or wrong bearer token")


Who = Annotated[Identity, Depends(authorized)]


def create_app(service: Service, tokens: TokenHashes | None) -> FastAPI:
    """`tokens` None: no auth (only `trainstack serve --no-auth` on 127.0.0.1)."""
    app = FastAPI(title=TITLE, version="1", description=__doc__.split("\n\n")[1])
    app.add_middleware(BodyLimit)
    app.state.service, app.state.tokens = service, tokens

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        detail = service.redact(exc.detail)
        return JSONResponse({"detail": detail}, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        status, line = validation_line(exc, request)
        return JSONResponse({"detail": line}, status_code=status)

    auth = [Depends(authorized)]
    common = {"responses": ERRORS, "dependencies": auth}

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness and readiness: the process answers (the cluster is not asked)."""
        return {"status": "ok"}

    @app.post("/v1/runs", response_model=Submitted, status_code=201, **common)
    def submit_run(
        body: RunRequest, response: Response, who: Who, dryrun: bool = False
    ) -> Submitted:
        """Compose, validate and submit one run (the CLI's `launch`), owned by the token's
        user. The same run_id again: 200 `already active` while it runs, 201 `resumed` once
        it finished (403 when it is another user's and the token is not an admin's)."""
        status, submitted = service.submit_run(body, who, dryrun=dryrun)
        response.status_code = status
        return submitted

    @app.post(
        "/v1/sweeps",
        response_model=SweepSubmitted,
        status_code=201,
        responses=ERRORS,
        dependencies=auth,
    )
    def submit_sweep(body: SweepRequest, who: Who) -> SweepSubmitted:
        """Every point of a `launch -m` sweep; one bad point and nothing is submitted."""
        sweep_id, runs = service.submit_sweep(body, who)
        return SweepSubmitted(sweep_id=sweep_id, runs=runs)

    @app.get("/v1/runs", response_model=RunList, **common)
    async def list_runs(
        who: Who,
        state: Annotated[str | None, Query(description=f"one of {', '.join(STATES)}")] = None,
        sweep: str | None = None,
        owner: Annotated[str | None, Query(description="a user name, or `me`")] = None,
    ) -> RunList:
        """Runs of the cluster from the shared snapshot (about one LIST per second in all)."""
        if state is not None and state not in STATES:
            raise ApiError(422, f"state: {state!r} is not a state; allowed: {', '.join(STATES)}")
        owner = who.name if owner == "me" else owner
        views = await service.views_async()
        return RunList(runs=service.runs(state=state, sweep=sweep, views=views, owner=owner))

    @app.get("/v1/runs/{run_id}", response_model=Run, **common)
    async def get_run(run_id: str) -> Run:
        """State, retries, timestamps, last step and loss, progress and cost so far."""
        from datetime import UTC, datetime

        return to_run(service.view(run_id, await service.views_async()), datetime.now(UTC))

    @app.get("/v1/runs/{run_id}/metrics", response_model=Metrics, **common)
    def get_metrics(run_id: str, since_step: int | None = None) -> Metrics:
        """The run's metrics.jsonl lines that have a step (`since_step`: only later ones)."""
        from jobs.plot.metrics import read_run

        run = read_run(run_id, service.view(run_id).status.run_dir)
        records = [r for r in run.records if since_step is None or r["step"] > since_step]
        return Metrics(run_id=run_id, records=records)

    @app.get(
        "/v1/runs/{run_id}/logs",
        responses={200: {"content": {"text/plain": {}}}, **ERRORS},
        dependencies=auth,
        response_class=StreamingResponse,
    )
    def get_logs(
        run_id: str, follow: bool = False, rank: Annotated[int, Query(ge=0)] = 0
    ) -> StreamingResponse:
        """A rank's log (0: the master); `follow=true` streams until the run ends."""
        lines = service.logs(run_id, rank=rank, follow=follow)
        return StreamingResponse((f"{line}\n" for line in lines), media_type="text/plain")

    @app.delete(
        "/v1/runs/{run_id}",
        response_model=Cancelled,
        status_code=202,
        responses=ERRORS,
        dependencies=auth,
    )
    def cancel_run(run_id: str, who: Who) -> Cancelled:
        """Cancel (idempotent): the trainer checkpoints on SIGTERM; never auto-restarted. Only
        the run's owner or an admin (403 otherwise)."""
        state, outcome = service.cancel(run_id, who)
        return Cancelled(run_id=run_id, state=state, outcome=outcome)

    from jobs.api.dashboard import add_dashboard

    add_dashboard(app, service, tokens)
    return app
