"""Rendered manifests for a few combinations, pinned as golden YAML (reviewed by eye once).

Regenerate after an intended change with `TRAINSTACK_REGEN_GOLDEN=1 pytest tests/jobs`, then
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.manifests import to_yaml
from tests.jobs.conftest import CLUSTER, OWN_DATA, build

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("TRAINSTACK_REGEN_GOLDEN") == "1"

CASES = {
    # CI's cluster smoke test: no EFA, one node.
    "smoke_g5": ["experiment=smoke", "compute=g5.12xlarge", *CLUSTER],
    # The flagship: EFA with GPUDirect RDMA, Master + 3 Workers, secrets by reference.
    "llama3_8b_p5x4": [
        "experiment=llama3_8b_p5x4",
        *CLUSTER,
        *OWN_DATA,
        "job.secrets.wandb_api_key={name:wandb,key:api-key}",
        "job.secrets.hf_token={name:hf,key:token}",
        "job.active_deadline_seconds=86400",
    ],
    # Elastic: Worker-only with c10d rendezvous, EFA without GPUDirect RDMA.
    "elastic_g6e": [
        "model=llama3_1b",
        "compute=g6e.48xlarge",
        "compute.nodes=2",
        "job.elastic.min_nodes=1",
        "job.elastic.max_nodes=4",
        *CLUSTER,
    ],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_match_golden(case: str):
    job = build(CASES[case], run_id=case.replace("_", "-"), sweep_id="sweep-golden")
    rendered = to_yaml(job.manifests)
    path = GOLDEN / f"{case}.yaml"
    if REGEN:
        path.write_text(rendered)
    assert path.exists(), f"no golden file {path}; run with TRAINSTACK_REGEN_GOLDEN=1"
    assert rendered == path.read_text()


def test_rendering_is_pure():
    first = build(CASES["llama3_8b_p5x4"]).manifests
    assert build(CASES["llama3_8b_p5x4"]).manifests == first
