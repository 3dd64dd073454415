"""The dashboard at `/`: plain server-rendered pages over the same service as the API.

`/` lists runs (state, progress, cost so far); `/runs/{id}` shows one run with its charts,
re-fetched every few seconds while it trains (its `trainstack eval` scores among them), and a
table of its evals (the answer of `GET /v1/runs/{id}/evals`); `/sweeps/{id}` overlays a sweep's
runs coloured by the swept value. Charts are the figure of jobs/plot/charts.py drawn by uPlot
(vendored in static/). Browsers sign in at `/login` (a page asked for without a session answers
401 with the sign-in form): the token buys a server-side session (jobs/api/sessions.py) whose
random id goes into an HttpOnly, SameSite=Strict cookie, `Secure` over TLS, accepted for GET
requests only, so it cannot be used to submit or cancel.
"""

from __future__ import annotations

import html
import threading
import time
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from jobs.api.auth import TokenHashes, token_hash
from jobs.api.models import Eval, Evals
from jobs.api.service import ApiError, Service, to_run
from jobs.api.sessions import SESSION_COOKIE, LoginLimiter, Sessions
from jobs.plot.charts import figure as make_figure
from jobs.plot.charts import metric_name
from jobs.plot.metrics import MetricsFiles, RunMetrics
from trainer.evaluation.results import EvalSummary, run_evals

STATIC = Path(__file__).resolve().parent / "static"
POLL_MS = 5000
FIGURE_WIDTH = 1200
"""Pixels a figure is drawn at when the page does not say (charts.js sends its width)."""
MAX_FIGURE_WIDTH = 4000
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"
"""Scripts only from /static (no inline script); inline styles for progress bars."""
MAX_EVAL_ROWS = 400
"""Rows of a run page's evals table (newest checkpoints first); the API lists them all."""
EVALS_TTL_S = 30.0
"""How long a figure poll reuses a run's eval scores (each read is a listing and a GET per
checkpoint; a checkpoint is scored every few minutes at most)."""


def evals_answer(run_id: str, run_dir: str | None) -> Evals:
    """`GET /v1/runs/{id}/evals`'s answer; the run page's table is drawn from the same."""
    return Evals(run_id=run_id, evals=[Eval(**vars(s)) for s in run_evals(run_dir)])


def evals_table(answer: Evals) -> str:
    """Step, how it was scored, task, metric and value per row, newest step first; every
    name is escaped (the run's own results.json gave it)."""
    rows: list[str] = []
    total = 0
    for item in reversed(answer.evals):
        head = f"{_cell(item.step, True)}{_cell(item.via)}"
        if item.error:
            cells = [f'{head}<td colspan="3" class="error">{html.escape(item.error)}</td>']
        else:
            cells = [
                f"{head}{_cell(task)}{_cell(metric_name(metric))}{_cell(f'{value:.4f}', True)}"
                for task, metrics in item.scores.items()
                for metric, value in metrics.items()
            ]
        total += len(cells)
        rows += [f'<tr data-step="{item.step}">{c}</tr>' for c in cells]
    if not rows:
        return ""
    more = ""
    if total > MAX_EVAL_ROWS:
        more = (
            f"<p>{total - MAX_EVAL_ROWS} more rows: GET /v1/runs/"
            f"{html.escape(quote(answer.run_id))}/evals</p>"
        )
    head = "".join(f"<th>{h}</th>" for h in ("step", "via", "task", "metric", "value"))
    return (
        f'<h2>evals</h2><table id="evals"><tr>{head}</tr>{"".join(rows[:MAX_EVAL_ROWS])}'
        f"</table>{more}"
    )


class EvalScores:
    """Runs' eval scores for the figure polls: read again once EVALS_TTL_S old; bounded."""

    def __init__(self, max_runs: int = 64, ttl_s: float = EVALS_TTL_S):
        self.max_runs, self.ttl_s = max_runs, ttl_s
        self._read: OrderedDict[str, tuple[float, list[EvalSummary]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_dir: str) -> list[EvalSummary]:
        now = time.monotonic()
        with self._lock:
            found = self._read.get(run_dir)
        if found is not None and now - found[0] < self.ttl_s:
            return found[1]
        summaries = run_evals(run_dir)
        with self._lock:
            self._read.pop(run_dir, None)
            self._read[run_dir] = (now, summaries)
            while len(self._read) > self.max_runs:
                self._read.popitem(last=False)
        return summaries


def _page(title: str, body: str, status: int = 200, headers=None) -> HTMLResponse:
    return HTMLResponse(
        f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/uPlot.min.css">
<link rel="stylesheet" href="/static/dashboard.css">
</head><body><p><a href="/">runs</a></p><h1>{html.escape(title)}</h1>{body}
<script src="/static/uPlot.iife.min.js"></script><script src="/static/charts.js"></script>
</body></html>""",
        status_code=status,
        headers={"Content-Security-Policy": CSP, **(headers or {})},
    )


def _cell(value, numeric: bool = False) -> str:
    text = "-" if value is None else html.escape(str(value))
    return f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>"


def _money(value: float | None) -> str | None:
    return None if value is None else f"${value:,.2f}"


def _progress(run) -> str:
    if run.progress is None:
        return _cell(None if run.last_step is None else f"step {run.last_step}")
    percent = round(100 * run.progress)
    return (
        f'<td><span class="bar"><span style="width:{percent}%"></span></span> '
        f"{run.last_step}/{run.max_steps}</td>"
    )


def runs_table(runs) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("run", "sweep", "state", "nodes", "progress", "loss", "cost so far", "started")
    )
    rows = []
    for run in runs:
        link = f'<a href="/runs/{quote(run.run_id)}">{html.escape(run.run_id)}</a>'
        sweep = (
            f'<a href="/sweeps/{quote(run.sweep_id)}">{html.escape(run.sweep_id)}</a>'
            if run.sweep_id
            else "-"
        )
        loss = None if run.last_loss is None else f"{run.last_loss:.4f}"
        rows.append(
            f'<tr data-run="{html.escape(run.run_id)}"><td>{link}</td><td>{sweep}</td>'
            f'<td class="state-{run.state}">{run.state}</td>{_cell(run.nodes, True)}'
            f"{_progress(run)}{_cell(loss, True)}{_cell(_money(run.cost_so_far_usd), True)}"
            f"{_cell(run.started_at)}</tr>"
        )
    return f'<table id="runs"><tr>{head}</tr>{"".join(rows)}</table>'


def _login_form(next_path: str) -> str:
    target = html.escape(
        next_path if next_path.startswith("/") and not next_path.startswith("//") else "/"
    )
    return (
        '<form method="post" action="/login">'
        f'<input type="hidden" name="next" value="{target}">'
        '<label>API token <input type="password" name="token" id="token" autofocus></label> '
        '<button type="submit" id="sign-in">sign in</button></form>'
    )


def add_dashboard(
    app: FastAPI,
    service: Service,
    tokens: TokenHashes | None,
    sessions: Sessions,
    login_limiter: LoginLimiter,
    metrics_files: MetricsFiles,
) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    eval_scores = EvalScores()

    def signed_in(request: Request) -> bool:
        if tokens is None:
            return True
        session = sessions.token_hash(request.cookies.get(SESSION_COOKIE))
        return tokens.identify_hash(session) is not None

    def sign_in_page(request: Request) -> HTMLResponse:
        """401 with the sign-in form, which brings the browser back here."""
        return _page("sign in", _login_form(request.url.path), status=401)

    @app.get("/login", include_in_schema=False)
    def login_form(next: str = "/") -> HTMLResponse:
        return _page("sign in", _login_form(next))

    @app.post("/login", include_in_schema=False)
    async def login(request: Request):
        client = request.client.host if request.client else "unknown"
        wait_s = login_limiter.allow(client)
        if wait_s is not None:
            return _page(
                "sign in",
                f'<p id="error">too many sign-in attempts; wait {wait_s:.0f} s</p>',
                status=429,
                headers={"Retry-After": str(round(wait_s))},
            )
        form = parse_qs((await request.body()).decode(errors="replace"))
        token = (form.get("token") or [""])[0]
        target = (form.get("next") or ["/"])[0]
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        known = tokens is None or tokens.identify(token) is not None
        if not known:
            return _page(
                "sign in",
                '<p id="error">wrong token</p><p><a href="/login">again</a></p>',
                status=401,
            )
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            sessions.create(token_hash(token)),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https" or app.state.secure_cookies,
            max_age=round(sessions.ttl_s),
        )
        return response

    @app.get("/", include_in_schema=False)
    def index(request: Request):
        if not signed_in(request):
            return sign_in_page(request)
        try:
            runs = service.runs()
        except ApiError as err:
            return _page("runs", f'<p id="error">{html.escape(err.detail)}</p>')
        return _page("runs", runs_table(runs) if runs else "<p>no runs yet</p>")

    @app.get("/runs/{run_id}", include_in_schema=False)
    def run_page(run_id: str, request: Request):
        if not signed_in(request):
            return sign_in_page(request)
        try:
            run = to_run(service.view(run_id), datetime.now(UTC))
        except ApiError as err:
            return _page(run_id, f'<p id="error">{html.escape(err.detail)}</p>')
        facts = {
            "state": run.state,
            "sweep": run.sweep_id,
            "nodes": f"{run.nodes} x {run.instance_type}" if run.instance_type else run.nodes,
            "retries": run.retries,
            "started": run.started_at,
            "finished": run.finished_at,
            "last step": run.last_step,
            "last loss": None if run.last_loss is None else f"{run.last_loss:.4f}",
            "$/hour": _money(run.hourly_usd),
            "cost so far": _money(run.cost_so_far_usd),
            "run dir": run.run_dir,
            "message": run.message or None,
        }
        facts_html = "".join(
            f"<dt>{k}</dt><dd>{html.escape(str(v))}</dd>" for k, v in facts.items() if v is not None
        )
        poll = 0 if run.state in ("succeeded", "failed", "cancelled") else POLL_MS
        charts = (
            f'<div id="charts" data-figure-url="/ui/figure?run={quote(run_id)}" '
            f'data-poll-ms="{poll}"></div>'
        )
        table = evals_table(evals_answer(run_id, run.run_dir))
        return _page(f"run {run_id}", f"<dl>{facts_html}</dl>{charts}{table}")

    @app.get("/sweeps/{sweep_id}", include_in_schema=False)
    def sweep_page(sweep_id: str, request: Request):
        if not signed_in(request):
            return sign_in_page(request)
        try:
            runs = service.runs(sweep=sweep_id)
        except ApiError as err:
            return _page(sweep_id, f'<p id="error">{html.escape(err.detail)}</p>')
        live = any(r.state in ("pending", "running") for r in runs)
        charts = (
            f'<div id="charts" data-figure-url="/ui/figure?sweep={quote(sweep_id)}" '
            f'data-poll-ms="{POLL_MS if live else 0}"></div>'
        )
        return _page(f"sweep {sweep_id}", runs_table(runs) + charts)

    @app.get("/ui/figure", include_in_schema=False)
    def figure(
        request: Request,
        run: str | None = None,
        sweep: str | None = None,
        width: Annotated[int, Query(ge=100, le=MAX_FIGURE_WIDTH)] = FIGURE_WIDTH,
    ):
        """The figure with each series cut to about `width` pixels' worth of points; each
        poll reads only what the runs' metrics files gained."""
        if not signed_in(request):
            return JSONResponse({"detail": "sign in at /login"}, status_code=401)
        try:
            views = service.views()
        except ApiError as err:
            return JSONResponse({"detail": err.detail}, status_code=err.status)
        chosen = [
            v
            for v in views.values()
            if (run is not None and v.status.run_id == run)
            or (sweep is not None and v.status.sweep_id == sweep)
        ]
        if not chosen:
            return JSONResponse({"detail": "no such run or sweep"}, status_code=404)
        metrics = [
            metrics_files.get(v.status.run_id, v.status.run_dir).downsampled(width)
            if v.status.run_dir
            else RunMetrics(v.status.run_id)
            for v in chosen
        ]
        for view, run_metrics in zip(chosen, metrics, strict=True):
            if view.status.run_dir:
                run_metrics.evals = eval_scores.get(view.status.run_dir)
        result = make_figure(metrics, sweep=sweep is not None)
        result["live"] = any(not v.status.finished for v in chosen)
        return result
