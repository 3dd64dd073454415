"""The training namespace enforces the Pod Security Standard the rendered pods meet."""

from __future__ import annotations

from pathlib import PurePosixPath

import yaml

from infra.training_operator import (
    INIT_CONTAINER_CONFIGMAP,
    INIT_CONTAINER_KEY,
    OPERATOR_NAMESPACE,
    TEMPLATE_FLAG,
    init_container_template,
)
from jobs.backends.kubernetes.manifest_checks import check_restricted_pod
from tests.infra.pulumi_harness import run_program
from tests.infra.test_infra_kubeflow_trainer import with_operator

NAMESPACE = "kubernetes:core/v1:Namespace"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
DEPLOYMENT_PATCH = "kubernetes:apps/v1:DeploymentPatch"


def test_training_namespace_enforces_restricted(stack_runs):
    for run in stack_runs.values():
        (namespace,) = [
            n for n in run.of_type(NAMESPACE) if n.inputs["metadata"]["name"] == "training"
        ]
        labels = namespace.inputs["metadata"]["labels"]
        for mode in ("enforce", "audit", "warn"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def render_go_template(text: str, values: dict[str, object]) -> list[dict]:
    """The operator's rendering of its init-container template: each `{{.Name}}` replaced, the
    result read as a YAML list of containers (kubeflow/trainer v1.9.4
    pkg/controller.v1/pytorch/initcontainer.go GetInitContainer)."""
    for key, value in values.items():
        text = text.replace("{{." + key + "}}", str(value))
    assert "{{" not in text, "a placeholder the operator does not fill"
    return yaml.safe_load(text)


def test_the_pytorch_init_container_passes_restricted():
    # The values the operator fills in: its default image and tries (pkg/config/config.go).
    values = {"InitContainerImage": "alpine:3.10", "MaxTries": 100, "MasterAddr": "job-master-0"}
    containers = render_go_template(init_container_template(), values)
    assert [c["name"] for c in containers] == ["init-pytorch"]
    (init,) = containers
    assert init["image"] == "alpine:3.10" and "nslookup job-master-0" in init["command"][-1]
    # The worker pod it joins: the rendered PyTorchJob's worker, compliant on its own.
    pod = {"spec": {"containers": [], "initContainers": containers}}
    check_restricted_pod(pod, "init-pytorch")
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert init["resources"]["limits"] == {"cpu": "100m", "memory": "20Mi"}


def test_the_training_operator_reads_the_template(stack_runs):
    run = run_program(with_operator("pytorchjob"), "v1-init")
    (configmap,) = [
        c
        for c in run.of_type(CONFIGMAP)
        if c.inputs["metadata"]["name"] == INIT_CONTAINER_CONFIGMAP
    ]
    assert configmap.inputs["metadata"]["namespace"] == OPERATOR_NAMESPACE
    template = configmap.inputs["data"][INIT_CONTAINER_KEY]
    assert template == init_container_template()
    patch = run.one(DEPLOYMENT_PATCH).inputs
    assert patch["metadata"] == {"name": "training-operator", "namespace": OPERATOR_NAMESPACE}
    pod = patch["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (flag,) = [a for a in container["args"] if a.startswith(TEMPLATE_FLAG + "=")]
    path = PurePosixPath(flag.split("=", 1)[1])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert (
        volume["configMap"]["name"] == INIT_CONTAINER_CONFIGMAP
        and path.name in configmap.inputs["data"]
    )
    # A stack on Kubeflow Trainer has no operator to patch.
    assert all(r.of_type(DEPLOYMENT_PATCH) == [] for r in stack_runs.values())
