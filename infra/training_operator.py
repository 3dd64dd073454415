"""The Kubeflow Training Operator v1's PyTorch init container, made to pass the training
namespace's Pod Security Standard `restricted` (pure: the stack installs it, and localcluster
hands the same text to its local operator).

The operator adds an init container `init-pytorch` to every Worker pod of a PyTorchJob that has
a Master replica; it waits until the master's name resolves. Its built-in template has no
securityContext, so the namespace refuses every such pod. The operator reads the template from a
file instead when one exists at `--pytorch-init-container-template-file` (default
/etc/config/initContainer.yaml), a Go `html/template` rendered with `.InitContainerImage`,
`.MaxTries` and `.MasterAddr`, then unmarshalled as a YAML list of containers
(kubeflow/trainer v1.9.4 pkg/controller.v1/pytorch/initcontainer.go; the flag:
cmd/training-operator.v1/main.go; the defaults: pkg/config/config.go).
"""

from __future__ import annotations

import hashlib

import yaml

OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_DEPLOYMENT = "training-operator"
"""The overlay's Deployment and its container, both named so (kubeflow/trainer v1.9.4
manifests/base/deployment.yaml; the overlay's namespace: manifests/overlays/standalone)."""
INIT_CONTAINER_CONFIGMAP = "pytorch-init-container"
INIT_CONTAINER_KEY = "initContainer.yaml"
INIT_CONTAINER_DIR = "/etc/trainstack/pytorch-init-container"
TEMPLATE_FLAG = "--pytorch-init-container-template-file"
TEMPLATE_ANNOTATION = "trainstack.dev/pytorch-init-container-sha256"
"""On the operator's pod template: a changed template rolls the operator (it reads the file
once, at its first PyTorchJob)."""

INIT_UID = 65534
"""`nobody` in the operator's default init image (alpine): nslookup needs no root."""


def init_container_template() -> str:
    """The operator's init-container template (text for its Go template engine): upstream's
    container (image, resources and wait loop as v1.9.4's built-in one) with a securityContext
    that `restricted` admits (kubernetes.io/docs/concepts/security/pod-security-standards)."""
    container = {
        "name": "init-pytorch",
        "image": "{{.InitContainerImage}}",
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "limits": {"cpu": "100m", "memory": "20Mi"},
            "requests": {"cpu": "50m", "memory": "10Mi"},
        },
        "command": [
            "sh",
            "-c",
            "err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; "
            "then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err",
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": INIT_UID,
            "runAsGroup": INIT_UID,
            "readOnlyRootFilesystem": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    return yaml.safe_dump([container], sort_keys=False)


def template_flag(directory: str = INIT_CONTAINER_DIR) -> str:
    """The operator's argument naming the template file under `directory`."""
    return f"{TEMPLATE_FLAG}={directory}/{INIT_CONTAINER_KEY}"


def init_container_configmap() -> dict:
    """The ConfigMap holding the template, beside the operator."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": INIT_CONTAINER_CONFIGMAP, "namespace": OPERATOR_NAMESPACE},
        "data": {INIT_CONTAINER_KEY: init_container_template()},
    }


def operator_deployment_patch() -> dict:
    """What trainstack sets on the operator's Deployment (a server-side apply patch: the
    overlay's fields stay): the ConfigMap mounted, the flag naming its file."""
    digest = hashlib.sha256(init_container_template().encode()).hexdigest()
    volume = "pytorch-init-container"
    return {
        "metadata": {"name": OPERATOR_DEPLOYMENT, "namespace": OPERATOR_NAMESPACE},
        "spec": {
            "template": {
                "metadata": {"annotations": {TEMPLATE_ANNOTATION: digest}},
                "spec": {
                    "containers": [
                        {
                            "name": OPERATOR_DEPLOYMENT,
                            "args": [template_flag()],
                            "volumeMounts": [
                                {"name": volume, "mountPath": INIT_CONTAINER_DIR, "readOnly": True}
                            ],
                        }
                    ],
                    "volumes": [{"name": volume, "configMap": {"name": INIT_CONTAINER_CONFIGMAP}}],
                },
            }
        },
    }
