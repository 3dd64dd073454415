"""Fixtures for the infra tests; the harness itself is `tests/infra/pulumi_harness.py`."""

from __future__ import annotations

import asyncio

import pytest

from tests.infra.pulumi_harness import StackRun, run_program, stack_file_config


def ensure_event_loop() -> None:
    """Pulumi's runtime asks for the main thread's event loop; a suite that ran `asyncio.run`
    before (uvicorn, httpx in tests/api) leaves none set, so give it one."""
    try:
        asyncio.get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


@pytest.fixture(autouse=True)
def _event_loop() -> None:
    ensure_event_loop()


@pytest.fixture(scope="session")
def stack_runs() -> dict[str, StackRun]:
    """Both example stacks, run once per session (each run re-installs the mocks)."""
    ensure_event_loop()
    return {stack: run_program(stack_file_config(stack), stack) for stack in ("dev", "prod")}


@pytest.fixture(scope="session")
def api_stack_run() -> StackRun:
    """The dev stack with the Training API at its default settings, run once per session (the
    API, CI, network-policy and IAM-lint tests all read it)."""
    from tests.infra.test_infra_training_api import run, with_api

    ensure_event_loop()
    return run(with_api())
