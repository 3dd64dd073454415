"""The HTTP face of the Training API (FastAPI): routes, auth, limits and one-line errors.

`create_app(service, tokens)`; `trainstack serve` runs it under uvicorn. Every error body is
`{"detail": "<one line>"}`: 401 no or wrong token, 403 another user's run, 404 unknown run,
413 body over the limit, 400 malformed JSON, 422 bad input (the CLI's message), 409 conflict
(an object trainstack does not own, or an existing run), 429 too many log follows, a sweep
of the same user's still being submitted, or sign-ins, 503 cluster unreachable. Error lines
never carry the service's own settings (bucket, registry, account id). Everything but
`/healthz`, the sign-in form and static assets needs a token (`/docs` and `/openapi.json`
too); a dashboard session cookie is enough for GET requests only. Requests whose Host is not
an allowed host are 400 (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware
from swagger_ui_bundle import swagger_ui_path

from jobs.api.auth import Identity, TokenHashes
from jobs.api.dashboard import add_dashboard, evals_answer
from jobs.api.follow import END, Follower
from jobs.api.models import (
    Cancelled,
    Evals,
    Metrics,
    Problem,
    Run,
    RunList,
    RunRequest,
    Submitted,
    SweepRequest,
    SweepSubmitted,
)
from jobs.api.service import ApiError, Service, log_error, to_run
from jobs.api.sessions import SESSION_COOKIE, LoginLimiter, Sessions
from jobs.backends.base import STATES
from jobs.plot.metrics import MetricsFiles

MAX_BODY_BYTES = 64 * 1024
"""Requests are a few hundred bytes; anything near this is a mistake or an attack."""
TITLE = "trainstack Training API"
BEARER = HTTPBearer(auto_error=False, description="a token whose SHA-256 is in the Secret")
ERRORS = {code: {"model": Problem} for code in (400, 401, 403, 404, 409, 413, 422, 429, 503)}
SERVER_OPTIONS = {"proxy_headers": False}
"""uvicorn settings `trainstack serve` runs the app with (the tests' server too). No proxy
headers: X-Forwarded-For is whatever the client writes (uvicorn trusts it from loopback by
default), and the sign-in limit keys on the client's address; the stack's NLB forwards TCP,
so the peer is the client."""
METRICS_PAGE = 1000
MAX_METRICS_PAGE = 10_000


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
    """The first problem as `<field>: <what is wrong>`; malformed JSON is 400. One line: a
    field name is the client's text (a dict key may hold a newline)."""
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    where = " ".join(where.split())[:100]
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
    """The token's user (the app's `tokens`; None: `--no-auth`, the service's own user); for
    GET requests also a dashboard session's, while its token is in the Secret."""
    state = request.app.state
    if state.tokens is None:
        return state.service.anonymous
    who = state.tokens.identify(credentials.credentials) if credentials is not None else None
    if who is None and request.method == "GET":
        session = state.sessions.token_hash(request.cookies.get(SESSION_COOKIE))
        who = state.tokens.identify_hash(session)
    if who is not None:
        return who
    raise ApiError(401, "missing or wrong bearer token")


Who = Annotated[Identity, Depends(authorized)]


class TrustedHosts:
    """Starlette's TrustedHostMiddleware for everything but `/healthz` (the kubelet's probes
    name the pod's IP)."""

    def __init__(self, app, allowed_hosts: list[str]):
        self.app = app
        self.checked = TrustedHostMiddleware(app, allowed_hosts=allowed_hosts)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/healthz":
            return await self.app(scope, receive, send)
        return await self.checked(scope, receive, send)


def create_app(
    service: Service,
    tokens: TokenHashes | None,
    allowed_hosts: list[str] | None = None,
    sessions: Sessions | None = None,
    login_limiter: LoginLimiter | None = None,
    secure_cookies: bool = False,
) -> FastAPI:
    """`tokens` None: no auth (only `trainstack serve --no-auth` on 127.0.0.1).
    `allowed_hosts`: Host header values served (None: any). `secure_cookies`: TLS ends in
    front of the app (the load balancer), so cookies are `Secure` though it sees http."""
    app = FastAPI(
        title=TITLE,
        version="1",
        description=__doc__.split("\n\n")[1],
        docs_url=None,  # both served below, behind the token
        redoc_url=None,
        openapi_url=None,
    )
    app.state.secure_cookies = secure_cookies
    app.add_middleware(BodyLimit)
    if allowed_hosts is not None and "*" not in allowed_hosts:
        app.add_middleware(TrustedHosts, allowed_hosts=allowed_hosts)
    sessions = sessions or Sessions()
    login_limiter = login_limiter or LoginLimiter()
    metrics_files = MetricsFiles()
    app.state.service, app.state.tokens, app.state.sessions = service, tokens, sessions

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
        return to_run(service.view(run_id, await service.views_async()), datetime.now(UTC))

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=auth)
    async def docs() -> HTMLResponse:
        """Swagger UI from the swagger-ui-bundle package (served below): no CDN."""
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{TITLE} - docs",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/v1/runs/{run_id}/metrics", response_model=Metrics, **common)
    def get_metrics(
        run_id: str,
        after_step: int | None = None,
        since_step: Annotated[int | None, Query(deprecated=True)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_METRICS_PAGE)] = METRICS_PAGE,
    ) -> Metrics:
        """The run's metrics.jsonl lines that have a step, a page at a time: those with a
        step after `after_step` (`since_step`: the same), at most `limit`; `next_after_step`
        is set when more follow. A poll reads only what the file gained since the last, and
        at most a few MB of it: a large file is read over several requests."""
        run_dir = service.view(run_id).status.run_dir
        if not run_dir:
            return Metrics(run_id=run_id, records=[])
        start = after_step if after_step is not None else since_step
        records, more = metrics_files.get(run_id, run_dir).page(start, limit)
        # More to come with no record yet (a large file is indexed over several requests):
        # ask again from the same place.
        here = start if start is not None else -1
        following = (int(records[-1]["step"]) if records else here) if more else None
        return Metrics(run_id=run_id, records=records, next_after_step=following)

    @app.get("/v1/runs/{run_id}/evals", response_model=Evals, **common)
    def get_evals(run_id: str) -> Evals:
        """The run's `trainstack eval` results by checkpoint: each task's metrics (lm-eval's
        `metric,filter` names, stderrs left out). Read bounded: the newest 256 checkpoints,
        each results.json at most 4 MiB (a larger one is listed with an error)."""
        return evals_answer(run_id, service.view(run_id).status.run_dir)

    @app.get(
        "/v1/runs/{run_id}/logs",
        responses={200: {"content": {"text/plain": {}}}, **ERRORS},
        dependencies=auth,
        response_class=StreamingResponse,
    )
    async def get_logs(
        request: Request,
        run_id: str,
        who: Who,
        follow: bool = False,
        rank: Annotated[int, Query(ge=0)] = 0,
    ) -> Response:
        """A rank's log (0: the master); `follow=true` streams until the run ends. Followers
        of one rank share one stream from the cluster; a user may hold a few follows at a
        time (429 past that)."""
        if not follow:
            lines = await run_in_threadpool(service.logs, run_id, rank)
            return PlainTextResponse("".join(f"{line}\n" for line in lines))
        service.view(run_id, await service.views_async())
        follower = service.follow(run_id, rank, who.name)
        try:
            first = await follower.queue.get()
        except BaseException:
            follower.close()
            raise
        if isinstance(first, BaseException):
            follower.close()
            raise log_error(first)
        return StreamingResponse(_followed(request, follower, first), media_type="text/plain")

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

    add_dashboard(app, service, tokens, sessions, login_limiter, metrics_files)
    return app


DOCS_ASSETS = "/docs-assets"


async def _followed(request: Request, follower: Follower, first):
    """The follower's lines until the upstream ends or the client hangs up; either way the
    follower leaves at once (its upstream closes when it was the last). An upstream that
    fails (the cluster unreachable past the follow's own retries) ends it with one
    `[trainstack] <run>: log follow failed: <why>` line, not a silent end."""

    async def hung_up() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(hung_up())
    getter = None
    try:
        item = first
        while item is not END and not isinstance(item, BaseException):
            batch = [item]
            while not follower.queue.empty() and len(batch) < 1000:
                item = follower.queue.get_nowait()
                if item is END or isinstance(item, BaseException):
                    break
                batch.append(item)
            else:
                item = None
            yield "".join(f"{line}\n" for line in batch)
            if item is not None:
                break  # the upstream ended while the batch was gathered
            getter = asyncio.ensure_future(follower.queue.get())
            await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                return
            item = getter.result()
        if isinstance(item, BaseException):  # the status is sent: the reason is the last line
            run_id = follower.upstream.key[0]
            yield f"[trainstack] {run_id}: log follow failed: {log_error(item).detail}\n"
    finally:
        gone.cancel()
        if getter is not None:
            getter.cancel()
        follower.close()
