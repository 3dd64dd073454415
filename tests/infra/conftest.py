"""Fixtures for the infra tests; the harness itself is `tests/infra/pulumi_harness.py`."""

from __future__ import annotations

import pytest

from tests.infra.pulumi_harness import StackRun, run_program, stack_file_config


@pytest.fixture(scope="session")
def stack_runs() -> dict[str, StackRun]:
    """Both example stacks, run once per session (each run re-installs the mocks)."""
    return {stack: run_program(stack_file_config(stack), stack) for stack in ("dev", "prod")}
