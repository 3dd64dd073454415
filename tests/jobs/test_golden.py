"""Rendered manifests for a few combinations, pinned as golden YAML (reviewed by eye once).

Regenerate after an intended change with `TRAINSTACK_REGEN_GOLDEN=1 pytest tests/jobs`, then
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.backends.kubernetes.manifest_checks import trainjob_pod_template
from jobs.backends.kubernetes.manifests import to_yaml
from testing_support import crd_schema
from tests.jobs.conftest import CLUSTER, OWN_DATA, build

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("TRAINSTACK_REGEN_GOLDEN") == "1"

PYTORCHJOB = "job.api=pytorchjob"
SFT_INPUTS = [
    "model.init_from=s3://trainstack-models/Meta-Llama-3.1-8B-Instruct",
    "data.path=s3://trainstack-data/chat/train.jsonl",
]
CASES = {
    # The PyTorchJob cases (Training Operator v1), unchanged since before TrainJob.
    # CI's cluster smoke test: no EFA, one node.
    "smoke_g5": ["experiment=smoke", "compute=g5.12xlarge", *CLUSTER, PYTORCHJOB],
    # The flagship: EFA with GPUDirect RDMA, Master + 3 Workers, secrets by reference.
    "llama3_8b_p5x4": [
        "experiment=llama3_8b_p5x4",
        *CLUSTER,
        *OWN_DATA,
        "job.secrets.wandb_api_key={name:wandb,key:api-key}",
        "job.secrets.hf_token={name:hf,key:token}",
        "job.active_deadline_seconds=86400",
        PYTORCHJOB,
    ],
    # Elastic: Worker-only with c10d rendezvous, EFA without GPUDirect RDMA.
    "elastic_g6e": [
        "model=llama3_1b",
        "compute=g6e.48xlarge",
        "compute.nodes=2",
        "job.elastic.min_nodes=1",
        "job.elastic.max_nodes=4",
        *CLUSTER,
        PYTORCHJOB,
    ],
    # TrainJobs (Kubeflow Trainer v2, the default): the flagship on trainstack's p5 runtime,
    # queued in Kueue with a priority.
    "trainjob_llama3_8b_p5x4": [
        "experiment=llama3_8b_p5x4",
        *CLUSTER,
        *OWN_DATA,
        "job.secrets.wandb_api_key={name:wandb,key:api-key}",
        "job.secrets.hf_token={name:hf,key:token}",
        "job.active_deadline_seconds=86400",
        "job.queue=training",
        "job.priority=high",
    ],
    # EFA without GPUDirect RDMA, two nodes, the runtime of a stack's g6e group.
    "trainjob_g6e_x2": [
        "model=llama3_1b",
        "compute=g6e.48xlarge",
        "compute.nodes=2",
        "cluster.node_groups=[{name: g6e, instance_type: g6e.48xlarge}]",
        *CLUSTER,
    ],
    # The SFT experiment: Hugging Face weights in, chat data, export out.
    "trainjob_llama3_8b_sft_p5x2": ["experiment=llama3_8b_sft_p5x2", *CLUSTER, *SFT_INPUTS],
    # Anyone's program (runner=command) under torchrun: its own command, args and env, the
    # runner's scratch volume, the stack's FSx claim and spot capacity through the patch.
    "trainjob_command_g6e_spot": [
        "runner=command",
        "runner.command=[python,-u,train.py]",
        "+runner.args.lr=0.001",
        "+runner.env.MY_FLAG=1",
        "compute=g6e.48xlarge",
        "compute.capacity=spot",
        "storage.fsx=true",
        "storage.fsx_claim=fsx-claim",
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


@pytest.mark.parametrize("case", sorted(c for c in CASES if c.startswith("trainjob_")))
def test_trainjob_goldens_are_trainjobs_valid_against_the_v2_3_crd(case: str):
    config_map, train_job, policy = build(CASES[case], run_id=case.replace("_", "-")).manifests
    kinds = (config_map["kind"], train_job["kind"], policy["kind"])
    assert kinds == ("ConfigMap", "TrainJob", "NetworkPolicy")
    crd_schema.check(train_job)
    # The run's policy selects the pods by a label the TrainJob puts on them (its patch).
    pod_labels = trainjob_pod_template(train_job)["metadata"]["labels"]
    wanted = policy["spec"]["podSelector"]["matchLabels"]
    assert wanted and wanted.items() <= pod_labels.items()
