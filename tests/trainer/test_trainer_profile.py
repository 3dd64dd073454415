"""`trainer.profile.steps=[first, last]` leaves one Chrome trace per rank in the run dir —
local or S3 — that parses as JSON and holds the profiled steps' events."""

from __future__ import annotations

import json

import pytest

from testing_support.s3_server import MotoS3
from trainer.storage import open_run_storage

pytestmark = pytest.mark.slow

PROFILE = ["trainer.max_steps=4", "trainer.profile.steps=[2,3]"]


def _assert_traces(run_dir: str, ranks: int) -> None:
    storage = open_run_storage(run_dir)
    folder = "profile/steps-2-3"
    names = storage.list_dir(folder)
    assert names == [f"rank{r}.trace.json" for r in range(ranks)]  # no memory snapshot on CPU
    for name in names:
        trace = json.loads(storage.read_text(f"{folder}/{name}"))
        ops = {e.get("name") for e in trace["traceEvents"]}
        assert "aten::mm" in ops and "Optimizer.step#AdamW.step" in ops, sorted(ops)[:50]


def test_a_profiled_run_leaves_one_trace_per_rank(run_trainer):
    result = run_trainer(2, PROFILE)
    assert result.returncode == 0, result.stderr
    assert "profile written to" in result.stdout
    _assert_traces(result.run_dir, ranks=2)


def test_traces_land_in_an_s3_run_dir(run_trainer, s3_direct: MotoS3, s3_bucket: str):
    run_dir = f"s3://{s3_bucket}/runs/profiled"
    result = run_trainer(2, PROFILE, run_dir=run_dir)
    assert result.returncode == 0, result.stderr
    _assert_traces(run_dir, ranks=2)
