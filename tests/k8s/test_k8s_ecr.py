"""ECR tag -> digest pinning through boto3 against moto's server on 127.0.0.1."""

from __future__ import annotations

import pytest

from jobs.backends.kubernetes.client.api import ClusterError
from jobs.backends.kubernetes.client.ecr import pin_images, resolve_digest
from testing_support.k8s.cluster import pytorch_job
from tests.k8s.conftest import REGISTRY


def test_ecr_tag_is_pinned_to_its_digest(ecr):
    digest = ecr
    assert digest.startswith("sha256:")
    job = pytorch_job("e1")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["image"] = f"{REGISTRY}/trainstack/trainer:v1"
    (pinned,) = pin_images([job])
    images = {
        r["template"]["spec"]["containers"][0]["image"]
        for r in pinned["spec"]["pytorchReplicaSpecs"].values()
    }
    assert images == {f"{REGISTRY}/trainstack/trainer@{digest}"}
    # The input is not modified; other registries are left alone.
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "image"
    ].endswith(":v1")
    assert resolve_digest("ghcr.io/org/trainer:v1") == "ghcr.io/org/trainer:v1"


def test_unknown_tag_is_one_clear_line(ecr):
    with pytest.raises(ClusterError) as caught:
        resolve_digest(f"{REGISTRY}/trainstack/trainer:v2")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"job.image {REGISTRY}/trainstack/trainer:v2: cannot resolve the tag to a digest in ECR:"
    )
    assert "ImageNotFoundException" in message


def test_launch_submits_the_pinned_image(ecr, apiserver, trainstack):
    image = f"{REGISTRY}/trainstack/trainer:v1"
    assert trainstack("launch", "run_id=e2", f"job.image={image}", launch=True) == 0
    job = apiserver.get("pytorchjobs", "e2", "training")
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert master["image"] == f"{REGISTRY}/trainstack/trainer@{ecr}"


def test_a_trainjob_is_submitted_with_the_pinned_image(ecr, apiserver, trainstack):
    image = f"{REGISTRY}/trainstack/trainer:v1"
    args = ["run_id=e3", f"job.image={image}", "job.api=trainjob"]
    assert trainstack("launch", *args, launch=True) == 0
    job = apiserver.get("trainjobs", "e3", "training")
    assert job["spec"]["trainer"]["image"] == f"{REGISTRY}/trainstack/trainer@{ecr}"


def test_a_render_carries_the_digest_the_kubernetes_backend_would_submit(ecr, monkeypatch):
    from jobs.backends.render import backend as render
    from jobs.backends.render.backend import RenderBackend
    from tests.jobs.conftest import CLUSTER, build

    monkeypatch.setattr(render, "_PINNED", {})
    job = build(["compute=g5.12xlarge", *CLUSTER, f"job.image={REGISTRY}/trainstack/trainer:v1"])
    text = RenderBackend("unused").dryrun(job).text
    assert f"image: {REGISTRY}/trainstack/trainer@{ecr}" in text
    assert "trainer:v1" not in text
