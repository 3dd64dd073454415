"""Many users at once on the Training API (issue 47, scenario 4): each user submits its runs one
after another, lists the runs after each submission, and follows one of its runs' logs for a
moment; among its submissions are one it sends twice (a client retrying) and one the service
refuses (a bad value). What came back is kept per request, so a test or benchmark can check it
against what the cluster holds: no 5xx, every accepted run exactly once, no refused run left.

Used by tests/e2e/test_e2e_api_load.py and benchmarks/bench_api_load_localcluster.py (the real
control plane) and benchmarks/bench_api_load.py (the Kubernetes API test double).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

REFUSED_OVERRIDE = "trainer.max_steps=-1"
"""What each user's refused submission carries (422, before anything is written)."""


@dataclass
class Outcome:
    user: str
    kind: str
    """submit, resubmit, refused, list or follow"""
    run_id: str | None
    status: int | None
    """None: no HTTP answer (the error is in `error`)."""
    ms: float
    error: str = ""


@dataclass
class LoadResult:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def of(self, kind: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind == kind]

    @property
    def server_errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status is None or o.status >= 500]

    @property
    def accepted(self) -> list[str]:
        return [o.run_id for o in self.of("submit") if o.status == 201 and o.run_id]

    @property
    def refused(self) -> list[str]:
        return [o.run_id for o in self.of("refused") if o.run_id]

    def problems(self, on_cluster: list[str]) -> list[str]:
        """What breaks the promises, given the job names the cluster holds."""
        found = []
        if self.server_errors:
            first = self.server_errors[0]
            found.append(f"{len(self.server_errors)} 5xx/no answer, first: {first}")
        twice = [name for name, n in Counter(on_cluster).items() if n > 1]
        if twice:
            found.append(f"runs on the cluster twice: {twice}")
        dup_ids = [name for name, n in Counter(self.accepted).items() if n > 1]
        if dup_ids:
            found.append(f"run ids accepted twice: {dup_ids}")
        missing = sorted(set(self.accepted) - set(on_cluster))
        if missing:
            found.append(f"accepted but not on the cluster: {missing[:5]}")
        left = sorted(set(self.refused) & set(on_cluster))
        if left:
            found.append(f"refused but left on the cluster: {left[:5]}")
        wrong = [o for o in self.of("refused") if o.status != 422]
        if wrong:
            found.append(f"refusals answered otherwise: {wrong[:3]}")
        again = [o for o in self.of("resubmit") if o.status != 200]
        if again:
            found.append(f"a resubmission not answered `already active`: {again[:3]}")
        return found


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_load(
    url: str,
    tokens: dict[str, str],
    runs_per_user: int,
    request_for: Callable[[str, str], dict],
    verify: str | bool = True,
    follow_s: float = 0.5,
) -> LoadResult:
    """Every user in `tokens` (user -> bearer token) at once; `request_for(user, run_id)` is the
    body of a run request."""
    import httpx  # lazy: httpx, for the callers that load the API

    result = LoadResult()
    limits = httpx.Limits(max_connections=len(tokens) * 2 + 5)
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits, verify=verify) as c:

        async def call(user: str, kind: str, run_id: str | None, method: str, path: str, **kw):
            headers = {"Authorization": f"Bearer {tokens[user]}"}
            begun = time.perf_counter()
            try:
                response = await c.request(method, path, headers=headers, **kw)
                status, error = response.status_code, ""
                if status >= 400 and kind not in ("refused",):
                    error = response.text[:200]
            except httpx.HTTPError as err:
                status, error = None, f"{type(err).__name__}: {err}"
            ms = 1000 * (time.perf_counter() - begun)
            result.outcomes.append(Outcome(user, kind, run_id, status, ms, error))

        async def follow(user: str, run_id: str) -> None:
            """Follow the run's log for `follow_s`; status 0: no first line by then (a queued
            run has no pod yet), which is no error of the service."""
            headers = {"Authorization": f"Bearer {tokens[user]}"}
            begun = time.perf_counter()
            status: int | None = 0
            error = ""
            params = {"follow": "true"}
            try:
                async with asyncio.timeout(follow_s):
                    path = f"/v1/runs/{run_id}/logs"
                    async with c.stream("GET", path, params=params, headers=headers) as response:
                        status = response.status_code
                        async for _ in response.aiter_lines():
                            pass
            except TimeoutError:
                pass  # followed for a moment (or no first line yet): enough
            except httpx.HTTPError as err:
                status, error = None, f"{type(err).__name__}: {err}"
            ms = 1000 * (time.perf_counter() - begun)
            result.outcomes.append(Outcome(user, "follow", run_id, status, ms, error))

        async def user_session(user: str) -> None:
            for index in range(runs_per_user):
                run_id = f"{user}-r{index}"
                body = request_for(user, run_id)
                await call(user, "submit", run_id, "POST", "/v1/runs", json=body)
                await call(user, "list", None, "GET", "/v1/runs")
                if index == 0:
                    await call(user, "resubmit", run_id, "POST", "/v1/runs", json=body)
                    await follow(user, run_id)
            bad = request_for(user, f"{user}-bad")
            bad["overrides"] = [*bad.get("overrides", []), REFUSED_OVERRIDE]
            await call(user, "refused", f"{user}-bad", "POST", "/v1/runs", json=bad)

        await asyncio.gather(*(user_session(user) for user in tokens))
    result.seconds = time.monotonic() - started
    return result


def figures(result: LoadResult) -> dict:
    """p50/p99 of submit and list, in ms, and the counts."""
    submit = [o.ms for o in result.of("submit")]
    listed = [o.ms for o in result.of("list")]

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return {
        "seconds": round(result.seconds, 1),
        "requests": len(result.outcomes),
        "submits": len(submit),
        "accepted": len(result.accepted),
        "submit_p50_ms": rounded(percentile(submit, 0.5)),
        "submit_p99_ms": rounded(percentile(submit, 0.99)),
        "list_p50_ms": rounded(percentile(listed, 0.5)),
        "list_p99_ms": rounded(percentile(listed, 0.99)),
        "server_errors": len(result.server_errors),
    }
