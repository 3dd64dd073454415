"""One scenario, written once, run on every place a Run can live: in-process on the local
backend (tests/python_api/test_local_api.py) and through `trainstack.Client` against the
Training API as deployed (tests/api/test_api_python_client.py). Same states, same exceptions."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import trainstack


def lifecycle(launch: Callable[..., trainstack.Run], find: Callable[[str], trainstack.Run]) -> None:
    """`launch(*overrides)` starts a run that runs until cancelled; `find(run_id)`
    re-attaches. Launch, status, logs, re-attach, a wait that times out, cancel, and the
    refusals, with the states as `trainstack runs` prints them."""
    run = launch("run_id=scenario")
    assert run.id == "scenario" and run.submitted
    assert run.status().state in ("pending", "queued", "running")
    deadline = time.monotonic() + 60
    while (state := run.status().state) != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state == "running"
    assert all(isinstance(line, str) for line in run.logs())
    again = find("scenario")
    assert again.id == "scenario" and again.status().state == "running"
    with pytest.raises(trainstack.WaitTimeout):
        run.wait(timeout=0.2, poll=0.05)
    again.cancel()
    with pytest.raises(trainstack.RunFailed) as stopped:
        run.wait(timeout=60, poll=0.1)
    assert stopped.value.state == "cancelled" == run.status().state
    run.cancel()  # idempotent
    with pytest.raises(trainstack.RunNotFound):
        find("no-such-run")
    with pytest.raises(trainstack.ConfigError) as bad:
        launch("trainer.max_stepz=1")
    assert bad.value.key == "trainer.max_stepz"
