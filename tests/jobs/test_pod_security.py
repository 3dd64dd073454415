"""Every rendered pod meets the `restricted` Pod Security Standard the training namespace
enforces, and the manifest check refuses a template that does not (before anything is sent)."""

from __future__ import annotations

import copy

import pytest

from jobs.backends.kubernetes.manifest_checks import ManifestError, check_manifests
from tests.jobs.conftest import CLUSTER, build


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    job = build(["compute=p5.48xlarge", "compute.nodes=2", *CLUSTER, "job.api=pytorchjob"])
    return job.manifests


def templates(manifests: list[dict]) -> list[dict]:
    job = next(m for m in manifests if m["kind"] == "PyTorchJob")
    return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


def test_rendered_pods_are_locked_down_as_the_image_user(manifests):
    for template in templates(manifests):
        pod = template["spec"]["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = template["spec"]["containers"]
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"] == {"drop": ["ALL"]}  # EFA needs nothing added back
        assert ctx["runAsNonRoot"] is True


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda c, p: (c["securityContext"].pop("runAsNonRoot"), p.pop("runAsNonRoot")),
            "runAsNonRoot: must be true",
        ),
        (lambda c, p: c.pop("securityContext"), "allowPrivilegeEscalation: false"),
        (lambda c, p: c["securityContext"].update(runAsUser=0), "runAsUser: must not be 0"),
        (
            lambda c, p: c["securityContext"].update(allowPrivilegeEscalation=True),
            "allowPrivilegeEscalation: false",
        ),
        (
            lambda c, p: c["securityContext"]["capabilities"].update(add=["IPC_LOCK"]),
            "capabilities.add: nothing but NET_BIND_SERVICE, got ['IPC_LOCK']",
        ),
        (
            lambda c, p: (c["securityContext"].pop("seccompProfile"), p.pop("seccompProfile")),
            "seccompProfile.type: RuntimeDefault",
        ),
    ],
)
def test_a_template_breaking_the_restricted_standard_is_refused(manifests, mutate, message):
    broken = copy.deepcopy(manifests)
    template = templates(broken)[0]
    mutate(template["spec"]["containers"][0], template["spec"]["securityContext"])
    with pytest.raises(ManifestError) as caught:
        check_manifests(broken, "1.33")
    assert message in str(caught.value)
    assert "Pod Security Standard restricted" in str(caught.value)
