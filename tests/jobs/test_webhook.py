"""The operator's webhook rules and the strict Kubernetes schema catch bad manifests."""

from __future__ import annotations

import copy

import pytest

from jobs.backends.kubernetes.manifest_checks import ManifestError, check_manifests
from tests.jobs.conftest import CLUSTER, build

VERSION = "1.33"
PYTORCHJOB = "job.api=pytorchjob"


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    return build([*CLUSTER, PYTORCHJOB, "compute=p4d.24xlarge", "compute.nodes=2"]).manifests


def broken(manifests: list[dict], edit) -> list[dict]:
    copied = copy.deepcopy(manifests)
    edit(copied[1]["spec"], copied[1])
    return copied


def master_container(spec: dict) -> dict:
    return spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


def test_valid_manifests_pass(manifests):
    check_manifests(manifests, VERSION)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s, j: s["pytorchReplicaSpecs"]["Master"].update(replicas=2), "must be 1"),
        (lambda s, j: master_container(s).update(name="main"), "named 'pytorch'"),
        (lambda s, j: master_container(s).pop("image"), "needs an image"),
        (lambda s, j: j["metadata"].update(name="Bad_Name"), "DNS-1035"),
        (lambda s, j: j["metadata"].update(name="x" * 60), "at most"),
        (
            lambda s, j: s.update(elasticPolicy={"rdzvBackend": "c10d", "nProcPerNode": 8}),
            "one place",
        ),
        (
            lambda s, j: s["pytorchReplicaSpecs"].update(Chief=s["pytorchReplicaSpecs"]["Master"]),
            "replica types",
        ),
    ],
)
def test_webhook_rules(manifests, edit, message):
    with pytest.raises(ManifestError, match=message):
        check_manifests(broken(manifests, edit), VERSION)


@pytest.mark.parametrize(
    "edit,path",
    [
        (lambda s, j: master_container(s).update(imagePullPolicy=3), "imagePullPolicy"),
        (lambda s, j: master_container(s).update(bogusField=True), "containers.0"),
        (
            lambda s, j: s["pytorchReplicaSpecs"]["Master"]["template"]["spec"].update(
                terminationGracePeriodSeconds="long"
            ),
            "terminationGracePeriodSeconds",
        ),
    ],
)
def test_pod_templates_are_checked_strictly(manifests, edit, path):
    with pytest.raises(ManifestError, match=path):
        check_manifests(broken(manifests, edit), VERSION)


def test_configmap_is_checked_too(manifests):
    bad = copy.deepcopy(manifests)
    bad[0]["data"] = {"config.yaml": 42}
    with pytest.raises(ManifestError, match="ConfigMap"):
        check_manifests(bad, VERSION)


@pytest.mark.parametrize("version", ["2.0", "one"])
def test_unsupported_kubernetes_version(manifests, version):
    with pytest.raises(ManifestError, match=r"cluster\.kubernetes_version"):
        check_manifests(manifests, version)


def test_every_runtime_passes_jobsets_webhook_and_a_hyphenated_rule_name_is_refused():
    """JobSet's webhook (kubernetes-sigs/jobset v0.12.0, pkg/webhooks/jobset_webhook.go,
    `ruleNameFmt`) refuses failure-policy rule names with '-': Trainer's apply of the JobSet
    then fails for every TrainJob on the runtime."""
    from catalog import INSTANCE_TYPES
    from jobs.backends.kubernetes.manifest_checks import check_jobset_webhook
    from jobs.backends.kubernetes.runtimes import cluster_training_runtimes

    runtimes = cluster_training_runtimes([("p5", INSTANCE_TYPES["p5.48xlarge"])])
    for runtime in runtimes:
        check_jobset_webhook(runtime)
        check_manifests([runtime], VERSION)
    bad = copy.deepcopy(runtimes[0])
    bad["spec"]["template"]["spec"]["failurePolicy"]["rules"][0]["name"] = "permanent-exit-code"
    with pytest.raises(ManifestError, match=r"rules\[0\]\.name: 'permanent-exit-code'"):
        check_manifests([bad], VERSION)
