"""`Client(url, token)`: the Python API against a Training API (`trainstack serve`) over
HTTP, returning the same `Run` and `Sweep` and raising the same exceptions as in-process:
a response's status becomes the class that has it (jobs.errors.for_status: 422 ConfigError
naming the key, 404 RunNotFound, any other refusal SubmitError)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from jobs.errors import ConfigError, SubmitError, for_status
from trainstack._run import Run, RunStatus, Sweep

if TYPE_CHECKING:
    import httpx

RUN_ID = "run_id="
SWEEP_PAGE = 1000
"""Metrics records asked per request (the API's maximum page)."""


def _status(body: dict[str, Any]) -> RunStatus:
    return RunStatus(
        run_id=body["run_id"],
        state=body["state"],
        backend="kubernetes",  # the Training API submits to its cluster alone
        step=body.get("last_step"),
        loss=body.get("last_loss"),
        retries=body.get("retries") or 0,
        reason=body.get("message") or "",
        sweep_id=body.get("sweep_id"),
        started_at=body.get("started_at"),
        finished_at=body.get("finished_at"),
        run_dir=body.get("run_dir"),
        owner=body.get("owner"),
    )


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    response.read()
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if not isinstance(detail, str):  # FastAPI's own validation answers a list
        detail = json.dumps(detail) if detail is not None else response.text[:500]
    raise for_status(response.status_code)(detail or f"HTTP {response.status_code}")


class Client:
    """A Training API at `url` (e.g. `http://localhost:8000`), with a bearer `token` (None
    for a server started with --no-auth). `timeout`: seconds per request (a log follow
    waits as long as its run)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0):
        import httpx  # lazy: the client extra; `import trainstack` needs no HTTP library

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx  # lazy: as in __init__

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise SubmitError(f"{self._http.base_url}: {err}") from err
        _raise_for(response)
        return response.json()

    # -- the public verbs, as trainstack's ------------------------------------------------------
    def launch(
        self,
        *overrides: str,
        values: Mapping[str, Any] | None = None,
        dryrun: bool = False,
        wait: bool = False,
        skip_preflight: bool = False,
        force: bool = False,
    ) -> Run:
        """`trainstack.launch` through `POST /v1/runs`."""
        return self.submit(
            overrides, values, dryrun=dryrun, wait=wait, skip_preflight=skip_preflight, force=force
        )

    def sweep(
        self,
        *overrides: str,
        axes: Mapping[str, Sequence[Any]],
        values: Mapping[str, Any] | None = None,
        sweep_id: str | None = None,
    ) -> Sweep:
        """`trainstack.sweep` through `POST /v1/sweeps` (all or nothing, as there)."""
        return self.submit_sweep(overrides, values, axes, sweep_id)

    def run(self, run_id: str) -> Run:
        self.status(run_id)  # RunNotFound when the API does not list it
        return Run(run_id, self)

    def runs(self, sweep: str | None = None, state: str | None = None) -> list[Run]:
        params = {k: v for k, v in (("sweep", sweep), ("state", state)) if v is not None}
        body = self._call("GET", "/v1/runs", params=params)
        return [Run(item["run_id"], self) for item in body["runs"]]

    # -- the place a Run asks ------------------------------------------------------------------
    def submit(
        self, overrides: Sequence[str], values: Mapping[str, Any] | None, **flags: Any
    ) -> Run:
        if flags.get("program") is not None:
            raise ConfigError(
                "program: a function of your workdir runs through trainstack.launch (the "
                "Training API reads no workdir); allowed: None",
                key="program",
            )
        for flag in ("skip_preflight", "force"):
            if flags.get(flag):
                raise ConfigError(
                    f"{flag}: the Training API decides it (its preflight always runs, a run is "
                    "its owner's); allowed: False",
                    key=flag,
                )
        run_ids = [o[len(RUN_ID) :] for o in overrides if o.startswith(RUN_ID)]
        body: dict[str, Any] = {
            "overrides": [*(o for o in overrides if not o.startswith(RUN_ID)), *_valued(values)]
        }
        if run_ids:
            body["run_id"] = run_ids[-1]
        dryrun = bool(flags.get("dryrun"))
        answer = self._call("POST", "/v1/runs", json=body, params={"dryrun": dryrun})
        run = Run(
            answer["run_id"], self, answer["plan"], answer.get("request"), submitted=not dryrun
        )
        if flags.get("wait") and not dryrun:
            run.wait()
        return run

    def submit_sweep(
        self,
        overrides: Sequence[str],
        values: Mapping[str, Any] | None,
        axes: Mapping[str, Sequence[Any]],
        sweep_id: str | None,
    ) -> Sweep:
        body: dict[str, Any] = {
            "overrides": [*overrides, *_valued(values)],
            "axes": {k: list(v) for k, v in axes.items()},
        }
        if sweep_id is not None:
            body["sweep_id"] = sweep_id
        answer = self._call("POST", "/v1/sweeps", json=body)
        runs = [Run(p["run_id"], self, p["plan"]) for p in answer["runs"]]
        return Sweep(answer["sweep_id"], runs, [])

    def status(self, run_id: str) -> RunStatus:
        return _status(self._call("GET", f"/v1/runs/{_quoted(run_id)}"))

    def logs(self, run_id: str, rank: int, follow: bool) -> Iterator[str]:
        import httpx  # lazy: as in __init__

        params = {"rank": rank, "follow": follow}
        timeout = None if follow else self._http.timeout
        try:
            with self._http.stream(
                "GET", f"/v1/runs/{_quoted(run_id)}/logs", params=params, timeout=timeout
            ) as response:
                _raise_for(response)
                yield from response.iter_lines()
        except httpx.HTTPError as err:
            raise SubmitError(f"{self._http.base_url}: {err}") from err

    def metrics(self, run_id: str, run_dir: str | None) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            params: dict[str, Any] = {"limit": SWEEP_PAGE}
            if after is not None:
                params["after_step"] = after
            page = self._call("GET", f"/v1/runs/{_quoted(run_id)}/metrics", params=params)
            records += page["records"]
            after = page.get("next_after_step")
            if after is None:
                return records

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        raise SubmitError(
            f"run {run_id}: the Training API does not list checkpoints; read them where the run "
            "dir is (trainstack.run(run_id, 'stack=...').checkpoints())"
        )

    def export(self, run_id: str, to: str, **options: Any) -> Any:
        raise SubmitError(
            f"run {run_id}: the Training API does not export; export where the run dir is "
            "(trainstack.run(run_id, 'stack=...').export(...))"
        )

    def cancel(self, run_id: str) -> None:
        self._call("DELETE", f"/v1/runs/{_quoted(run_id)}")

    def config(self, run_id: str) -> dict[str, Any] | None:
        return None  # the API serves no run's config


def _quoted(run_id: str) -> str:
    return quote(run_id, safe="")


def _valued(values: Mapping[str, Any] | None) -> list[str]:
    """`values` as the API quotes a request's (the override strings it is sent as)."""
    if not values:
        return []
    from jobs.api.overrides import override_value  # lazy: Hydra (0.3 s), for values alone

    return [f"{key}={override_value(value)}" for key, value in values.items()]
