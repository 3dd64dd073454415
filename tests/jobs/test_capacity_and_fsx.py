"""Issue 27 item 5: `compute.capacity` selects on-demand or spot nodes and the plan prices it;
`storage.fsx=true` mounts the stack's FSx claim in every pod, and is refused in one line when
the stack has none."""

from __future__ import annotations

import pytest

from catalog import INSTANCE_TYPES, SPOT_DISCOUNT
from jobs.compose import compose
from jobs.errors import JobConfigError
from jobs.materialize import materialize
from jobs.validate import validate_job
from tests.jobs.conftest import CLUSTER, GIT_SHA, NOW, build, trainjob_pod

G5 = [*CLUSTER, "compute=g5.12xlarge", "compute.nodes=2"]


def pod_specs(manifests: list[dict]) -> list[dict]:
    """The pods of the job, of either kind (a TrainJob's on its runtime)."""
    job = manifests[1]
    if job["kind"] == "TrainJob":
        return [trainjob_pod(job)]
    return [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


APIS = pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])


def plan_of(overrides: list[str]):
    return materialize(compose(overrides), now=NOW, git_sha=GIT_SHA, run_id="cap-1").plan


@pytest.mark.parametrize(
    ("capacity", "label"), [("on-demand", "ON_DEMAND"), ("spot", "SPOT"), ("any", None)]
)
@APIS
def test_capacity_selects_the_nodes_capacity_type(capacity, label, api):
    job = build([*G5, f"compute.capacity={capacity}", f"job.api={api}"])
    assert job.manifests[1]["kind"] == {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}[api]
    for pod in pod_specs(job.manifests):
        assert pod["nodeSelector"].get("eks.amazonaws.com/capacityType") == label
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "g5.12xlarge"


def test_the_plan_prices_the_capacity():
    on_demand = INSTANCE_TYPES["g5.12xlarge"].hourly_usd
    spot = plan_of([*G5, "compute.capacity=spot"])
    assert spot.hourly_usd == pytest.approx(2 * on_demand * (1 - SPOT_DISCOUNT), abs=0.01)
    assert "spot estimate" in spot.hourly_source
    assert plan_of([*G5, "compute.capacity=on-demand"]).hourly_usd == pytest.approx(2 * on_demand)
    assert "at most" in plan_of(G5).hourly_source  # any: the on-demand ceiling, said so
    quoted = plan_of([*G5, "compute.capacity=spot", "compute.hourly_usd=1.5"])
    assert quoted.hourly_usd == 3.0


def test_unknown_capacity_is_one_line():
    with pytest.raises(JobConfigError, match=r"^compute.capacity: 'cheap' is not allowed; allowed"):
        validate_job(compose([*G5, "compute.capacity=cheap"]), git_sha=GIT_SHA)


@APIS
def test_fsx_mounts_the_stacks_claim_in_every_pod_and_pods_read_from_it(api):
    job = build(
        [
            *G5,
            f"job.api={api}",
            "storage.fsx=true",
            "storage.fsx_claim=fsx-claim",
            "data.path=/fsx/datasets/web",
        ]
    )
    for pod in pod_specs(job.manifests):
        (volume,) = [v for v in pod["volumes"] if v["name"] == "fsx"]
        assert volume["persistentVolumeClaim"] == {"claimName": "fsx-claim"}
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "fsx"]
        assert mount["mountPath"] == "/fsx"
    plain = pod_specs(build([*G5, f"job.api={api}"]).manifests)
    assert not any("fsx" in str(v) for p in plain for v in p["volumes"])


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["storage.fsx=true"], "storage.fsx", "the stack has no FSx"),
        (
            ["storage.fsx=true", "storage.fsx_claim=c", "storage.fsx_mount=/tmp"],
            "storage.fsx_mount",
            "other than /tmp",
        ),
        (["data.path=/fsx/datasets/web"], "data.path", "path on this machine"),
    ],
)
def test_fsx_without_a_claim_or_a_bad_mount_is_refused(overrides, key, words):
    with pytest.raises(JobConfigError) as raised:
        validate_job(compose([*G5, *overrides]), git_sha=GIT_SHA)
    assert str(raised.value).startswith(f"{key}: ") and words in str(raised.value)
    assert "\n" not in str(raised.value)
