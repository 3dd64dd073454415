"""A run's export served by vLLM's OpenAI-compatible server on the cluster (`trainstack
serve-model RUN backend=render|kubernetes`): a pure function of the request and names.

Four namespaced objects, all labelled `trainstack.io/component=serving` and
`trainstack.io/served-run=<run id>` (the take-down deletes by those labels, and only objects
that also carry `app.kubernetes.io/managed-by=trainstack`):

- a ServiceAccount named after the run: EKS Pod Identity puts its name in the session tag
  `kubernetes-service-account`, and the stack's serving role (infra/serving.py) may read
  `runs/${aws:PrincipalTag/kubernetes-service-account}/export/*` and nothing else, so the pod
  reads this run's export alone;
- a Deployment: an init container (the trainer image, `python -m trainer.serving.fetch`) copies
  `<run_dir>/export/` into an emptyDir, then `vllm serve` reads it there. The startupProbe on
  `/health` allows `startup_timeout_s` for the model to load (no fixed initial delay); the
  readiness and liveness probes take over once it answers. GPUs, instance type and node group
  come from the catalog and the stack's node groups; a LoRA export (a PEFT adapter dir) is
  served on its base model with `--enable-lora --lora-modules <name>=<dir>`. Its pods run at
  the PriorityClass `trainstack-serving` (catalog.kubernetes.SERVING_PRIORITY_CLASS);
- a ClusterIP Service on port 8000;
- a NetworkPolicy: the namespace denies ingress by default (infra/cluster_addons.py); this one
  lets in, on the server's port only, pods of the same namespace labelled
  `trainstack.io/serving-client=true` and the Training API's pods
  (`app.kubernetes.io/name=trainstack-api`, infra/training_api.py's api_labels).
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog import INSTANCE_TYPES
from catalog.kubernetes import SERVING_PRIORITY_CLASS
from catalog.pods import pod_resources
from jobs.backends.kubernetes.client.ownership import MANAGED_BY, MANAGER
from jobs.backends.kubernetes.manifest_checks import (
    ManifestError,
    check_restricted_pod,
    check_schema,
)
from jobs.backends.kubernetes.manifests import drop_none
from jobs.backends.kubernetes.pod_parts import (
    GPU_TOLERATION,
    INSTANCE_TYPE_LABEL,
    SHM_MOUNT,
    scratch_volume,
    security_contexts,
    shm_volume,
)
from jobs.backends.kubernetes.runtimes import NODE_GROUP_LABEL
from jobs.naming import DNS_LABEL_MAX
from jobs.spec import LABEL_PREFIX

VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"
"""vLLM's OpenAI-compatible server, pinned (`--image` takes another)."""
PORT = 8000
COMPONENT_LABEL = f"{LABEL_PREFIX}/component"
COMPONENT = "serving"
SERVED_RUN_LABEL = f"{LABEL_PREFIX}/served-run"
CLIENT_LABEL = f"{LABEL_PREFIX}/serving-client"
"""Pods labelled `trainstack.io/serving-client=true` in the namespace may call served models."""
TRAINING_API_SELECTOR = {"app.kubernetes.io/name": "trainstack-api"}
"""The Training API's pods (infra/training_api.py, api_labels)."""
MODEL_DIR = "/models"
SERVER_CONTAINER = "vllm"
FETCH_CONTAINER = "fetch-export"
NAME_SUFFIX = "-serve"
MAX_NAME = DNS_LABEL_MAX
"""Service names are DNS-1035 labels; every object here is named within one."""
PROBE_PERIOD_S = 10
DEFAULT_STARTUP_TIMEOUT_S = 1800
"""How long a model may take to load before the kubelet restarts the server (large models
from a cold cache: minutes)."""
KINDS = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "ServiceAccount"),
)
"""What serving creates, in the order the take-down deletes it (the pods' owner first)."""


@dataclass(frozen=True)
class ServingSpec:
    run_id: str
    export_uri: str
    """`s3://<bucket>/runs/<run id>/export`: what the init container copies."""
    namespace: str
    instance_type: str
    gpus: int
    """GPUs the server takes (vLLM's tensor-parallel size)."""
    fetch_image: str
    """The trainer image (its `trainer.serving.fetch` copies the export)."""
    region: str
    kubernetes_version: str
    served_name: str
    """The model id clients send."""
    lora_base: str | None = None
    """A LoRA export's base model (a Hub id vLLM downloads); None: the export is full weights."""
    node_group: str | None = None
    """The stack's node group of `instance_type` (its nodes' `trainstack.io/node-group`)."""
    capacity_type: str | None = None
    """`eks.amazonaws.com/capacityType` the pod selects (ON_DEMAND, SPOT); None: any."""
    image: str = VLLM_IMAGE
    startup_timeout_s: int = DEFAULT_STARTUP_TIMEOUT_S


def serving_name(run_id: str) -> str:
    """The Deployment's, Service's and NetworkPolicy's name."""
    return f"{run_id}{NAME_SUFFIX}"


def service_account_name(run_id: str) -> str:
    """The run id itself: the serving role's policy reads it back from the Pod Identity
    session tag `kubernetes-service-account` as the run dir's name."""
    return run_id


def labels(run_id: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, COMPONENT_LABEL: COMPONENT, SERVED_RUN_LABEL: run_id}


def selector(run_id: str) -> str:
    """The label selector of exactly this run's serving objects (the take-down's)."""
    return ",".join(f"{k}={v}" for k, v in labels(run_id).items())


def url(spec: ServingSpec) -> str:
    """The Service's in-cluster base URL of the OpenAI API."""
    return f"http://{serving_name(spec.run_id)}.{spec.namespace}.svc.cluster.local:{PORT}/v1"


def _metadata(spec: ServingSpec, name: str) -> dict:
    return {"labels": labels(spec.run_id), "name": name, "namespace": spec.namespace}


def server_command(spec: ServingSpec) -> list[str]:
    local = f"{MODEL_DIR}/{spec.run_id}"
    if spec.lora_base is None:
        model, lora = local, []
    else:
        model, lora = (
            spec.lora_base,
            ["--enable-lora", "--lora-modules", f"{spec.served_name}={local}"],
        )
    return [
        "vllm",
        "serve",
        model,
        # A LoRA module's name is what clients send; the base keeps a name of its own.
        "--served-model-name",
        spec.served_name if spec.lora_base is None else f"{spec.served_name}-base",
        "--host",
        "0.0.0.0",
        "--port",
        str(PORT),
        "--tensor-parallel-size",
        str(spec.gpus),
        *lora,
    ]


def _probe(failure_threshold: int, period_s: int = PROBE_PERIOD_S) -> dict:
    return {
        "failureThreshold": failure_threshold,
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period_s,
        "timeoutSeconds": 5,
    }


def pod_spec(spec: ServingSpec) -> dict:
    instance = INSTANCE_TYPES[spec.instance_type]
    pod_security, container_security = security_contexts()
    scratch, scratch_mount, scratch_env = scratch_volume()
    models = {"emptyDir": {}, "name": "models"}
    models_mount = {"mountPath": MODEL_DIR, "name": "models"}
    # The catalog's share of the node per GPU (less the daemons' headroom), as a training
    # pod's; no EFA: one server is one node.
    share = pod_resources(instance, spec.gpus)
    amounts = {"cpu": share.cpu, "memory": share.memory, "nvidia.com/gpu": str(share.gpus)}
    fetch = {
        "command": [
            "python",
            "-m",
            "trainer.serving.fetch",
            spec.export_uri,
            f"{MODEL_DIR}/{spec.run_id}",
        ],
        "env": [{"name": "AWS_REGION", "value": spec.region}, *scratch_env],
        "image": spec.fetch_image,
        "imagePullPolicy": "IfNotPresent",
        "name": FETCH_CONTAINER,
        "resources": {
            "limits": {"cpu": "2", "memory": "4Gi"},
            "requests": {"cpu": "1", "memory": "2Gi"},
        },
        "securityContext": dict(container_security),
        "volumeMounts": [models_mount, scratch_mount],
    }
    server = {
        "command": server_command(spec),
        "env": scratch_env,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "livenessProbe": _probe(3, 30),
        "name": SERVER_CONTAINER,
        "ports": [{"containerPort": PORT, "name": "http", "protocol": "TCP"}],
        "readinessProbe": _probe(3),
        "resources": {"limits": dict(amounts), "requests": dict(amounts)},
        "securityContext": dict(container_security),
        # Waits for the model: the kubelet holds readiness and liveness back until it answers.
        "startupProbe": _probe(-(-spec.startup_timeout_s // PROBE_PERIOD_S)),
        # NCCL between the tensor-parallel workers goes through /dev/shm.
        "volumeMounts": [{**models_mount, "readOnly": True}, scratch_mount, SHM_MOUNT],
    }
    node_selector = {INSTANCE_TYPE_LABEL: spec.instance_type}
    if spec.node_group:
        node_selector[NODE_GROUP_LABEL] = spec.node_group
    if spec.capacity_type:
        node_selector["eks.amazonaws.com/capacityType"] = spec.capacity_type
    return {
        # vLLM never calls the Kubernetes API; AWS comes through Pod Identity's own token.
        "automountServiceAccountToken": False,
        "containers": [server],
        "initContainers": [fetch],
        "nodeSelector": node_selector,
        "priorityClassName": SERVING_PRIORITY_CLASS,
        "securityContext": pod_security,
        "serviceAccountName": service_account_name(spec.run_id),
        "tolerations": [GPU_TOLERATION],
        "volumes": [models, scratch, shm_volume(share.shm_size)],
    }


def deployment(spec: ServingSpec) -> dict:
    match = {COMPONENT_LABEL: COMPONENT, SERVED_RUN_LABEL: spec.run_id}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(spec, serving_name(spec.run_id)),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": match},
            # One GPU server at a time: a surge would ask for a second set of GPUs.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels(spec.run_id)}, "spec": pod_spec(spec)},
        },
    }


def service(spec: ServingSpec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, serving_name(spec.run_id)),
        "spec": {
            "ports": [{"name": "http", "port": PORT, "protocol": "TCP", "targetPort": "http"}],
            "selector": {COMPONENT_LABEL: COMPONENT, SERVED_RUN_LABEL: spec.run_id},
            "type": "ClusterIP",
        },
    }


def network_policy(spec: ServingSpec) -> dict:
    clients = [
        {"podSelector": {"matchLabels": {CLIENT_LABEL: "true"}}},
        {"podSelector": {"matchLabels": dict(TRAINING_API_SELECTOR)}},
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(spec, serving_name(spec.run_id)),
        "spec": {
            "ingress": [{"from": clients, "ports": [{"port": PORT, "protocol": "TCP"}]}],
            "podSelector": {
                "matchLabels": {COMPONENT_LABEL: COMPONENT, SERVED_RUN_LABEL: spec.run_id}
            },
            "policyTypes": ["Ingress"],
        },
    }


def service_account(spec: ServingSpec) -> dict:
    return {
        "apiVersion": "v1",
        "automountServiceAccountToken": False,
        "kind": "ServiceAccount",
        "metadata": _metadata(spec, service_account_name(spec.run_id)),
    }


def check_spec(spec: ServingSpec) -> None:
    """ManifestError (one line naming the key) for what the cluster would refuse."""
    name = serving_name(spec.run_id)
    if len(name) > MAX_NAME:
        raise ManifestError(
            f"RUN: {spec.run_id!r} is {len(spec.run_id)} characters; allowed: at most "
            f"{MAX_NAME - len(NAME_SUFFIX)} (the Service is named {name!r}, a DNS-1035 label)"
        )
    instance = INSTANCE_TYPES.get(spec.instance_type)
    if instance is None:
        raise ManifestError(
            f"compute: {spec.instance_type!r}; allowed: {', '.join(sorted(INSTANCE_TYPES))}"
        )
    if not 1 <= spec.gpus <= instance.gpus:
        raise ManifestError(
            f"compute.gpus_per_node: {spec.gpus}; allowed: 1 to {instance.gpus} "
            f"({spec.instance_type})"
        )
    if spec.startup_timeout_s < PROBE_PERIOD_S:
        raise ManifestError(
            f"--startup-timeout: {spec.startup_timeout_s}; allowed: at least {PROBE_PERIOD_S} s"
        )


def to_manifests(spec: ServingSpec) -> list[dict]:
    """[ServiceAccount, NetworkPolicy, Service, Deployment], in the order they can be applied
    (the account before the pods that run as it, the policy before the server listens),
    checked against Kubernetes' schemas of `spec.kubernetes_version` and the `restricted` Pod
    Security Standard the namespace enforces."""
    check_spec(spec)
    manifests = [
        drop_none(service_account(spec)),
        drop_none(network_policy(spec)),
        drop_none(service(spec)),
        drop_none(deployment(spec)),
    ]
    for manifest in manifests:
        where = f"{manifest['kind']} {manifest['metadata']['name']}"
        check_schema(manifest, spec.kubernetes_version, where)
    check_restricted_pod(
        manifests[-1]["spec"]["template"], f"Deployment {serving_name(spec.run_id)}"
    )
    return manifests
