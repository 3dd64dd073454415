"""A queued TrainJob carries only fields the pinned Kueue can hold.

Kueue updates the whole TrainJob with the Trainer types it vendors on admission and preemption
(kubernetes-sigs/kueue v0.19.2, pkg/controller/jobs/trainjob/trainjob_controller.go:
`RunWithPodSetsInfo` and `Stop` call `c.Update(ctx, t.Object())`), so a field those types lack
is dropped from the job. Kueue 0.19.2 vendors Trainer v2.2.1 (its go.mod); the field tree is
vendored from its `vendor/.../trainer/v1alpha1/trainjob_types.go` in
testing_support/k8s/data/kueue_trainer_fields.json
(testing_support/k8s/data/vendor_kueue_trainer_fields.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.settings.versions import KUEUE
from testing_support.k8s import fake_kueue
from tests.jobs.conftest import CLUSTER, build

FIELDS = json.loads(
    (Path(fake_kueue.__file__).parent / "data" / "kueue_trainer_fields.json").read_text()
)
QUEUED = [*CLUSTER, "compute=p5.48xlarge", "job.queue=training"]


def unknown_fields(value, tree, path: str = "") -> list[str]:
    """Paths in `value` that `tree` (the vendored field tree) has no place for."""
    if tree == "*" or value is None:
        return []
    if isinstance(value, list):
        return [
            p for i, item in enumerate(value) for p in unknown_fields(item, tree, f"{path}[{i}]")
        ]
    if not isinstance(value, dict):
        return [path]  # a scalar where the types have a struct
    found = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key not in tree:
            found.append(where)
        else:
            found += unknown_fields(item, tree[key], where)
    return found


def test_the_field_list_is_the_pinned_kueues():
    assert FIELDS["kueue_version"] == KUEUE["version"], (
        "infra/settings/versions.py's Kueue pin changed: re-vendor the field list "
        "(testing_support/k8s/data/vendor_kueue_trainer_fields.py)"
    )
    assert FIELDS["source"]["repo"] == "kubernetes-sigs/kueue"


def test_the_check_sees_a_field_kueue_drops():
    job = {
        "spec": {
            "runtimePatches": [
                {
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "spec": {"terminationGracePeriodSeconds": 600}
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    }
                }
            ]
        }
    }
    assert unknown_fields(job["spec"], FIELDS["trainjob"]["spec"]) == [
        "runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec"
        ".template.spec.terminationGracePeriodSeconds"
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["compute.nodes=2", "job.active_deadline_seconds=7200"],
        ["compute.capacity=spot", "job.priority=high"],
        ["job.termination_grace_period_seconds=600"],
        ["experiment=llama3_8b_p5x4", "data.path=s3://b/train.jsonl", "data.tokenizer=s3://b/t"],
        [
            "job.secrets.wandb_api_key={name:wandb,key:api-key}",
            "job.secrets.hf_token={name:hf,key:token}",
        ],
    ],
    ids=["default", "deadline", "capacity", "grace", "experiment", "secrets"],
)
def test_a_queued_trainjob_has_no_field_the_pinned_kueue_lacks(overrides):
    manifests = build([*QUEUED, *overrides]).manifests
    (job,) = [m for m in manifests if m["kind"] == "TrainJob"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert unknown_fields(job["spec"], FIELDS["trainjob"]["spec"]) == []
