"""What `pulumi up` installs into a cluster, for the local one: built by the same pure
functions infra uses, from a stack config parsed by infra's own parser (`LOCAL_SETTINGS` is what
a `Pulumi.local.yaml` would say), plus the stack file that makes `stack=local` work.

Two simulated p5.48xlarge nodes in one node group whose maxSize is 2: the ClusterQueue's quota
is exactly two nodes, as on EKS. One CPU node stands in for the system node group (data
prepare and CPU jobs run there).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from infra.bucket_layout import published_grants
from infra.cluster import SYSTEM_NODE_LABELS
from infra.cluster_addons import DEFAULT_DENY_POLICY, DEFAULT_DENY_SPEC, POD_SECURITY_LABELS
from infra.gpu_nodes import GPU_TAINT, node_labels
from infra.kubeflow_trainer import runtime_objects
from infra.kueue import (
    API_VERSION as KUEUE_API,
)
from infra.kueue import (
    cluster_queue_spec,
    flavor_quota,
    priority_class,
    resource_flavors,
)
from infra.serving import priority_class_object
from infra.settings.stack import parse_stack_config
from infra.settings.types import StackConfig
from infra.stack_defaults import job_defaults, render
from infra.training_api import RBAC_RULES, api_labels, api_name, network_policy_spec
from jobs.backends.kubernetes.pod_parts import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL

STACK = "local"
REGION = "us-east-1"
GPU_NODES = 2
SYSTEM_INSTANCE = "m6i.4xlarge"
SYSTEM_ALLOCATABLE = {"cpu": "16", "memory": "64Gi"}
"""The system node (the catalog lists GPU instances only): room for data prepare and CPU jobs."""
LOCAL_SETTINGS: dict[str, Any] = {
    "adminRoleArn": "arn:aws:iam::000000000000:role/localcluster",
    "availabilityZones": ["us-east-1a", "us-east-1b"],
    "publicAccessCidrs": ["127.0.0.1/32"],
    "systemNodeGroup": {
        "instanceType": SYSTEM_INSTANCE,
        "minSize": 1,
        "desiredSize": 1,
        "maxSize": 1,
    },
    "gpuNodeGroups": [
        {
            "name": "p5",
            "instanceType": "p5.48xlarge",
            "minSize": GPU_NODES,
            "desiredSize": GPU_NODES,
            "maxSize": GPU_NODES,
        }
    ],
    # Half the system node: room for two RayJobs' heads and submitters at once.
    "kueue": {"systemQuota": {"cpu": 8, "memoryGiB": 32}},
}
"""The local stack's `trainstack:*` settings; everything else keeps infra's defaults."""
BUCKET = "localcluster-runs"
"""The bucket name the local stack's S3 URLs use: never reached (pods are simulated)."""
REPOSITORY = "registry.localcluster.invalid/trainstack/trainer"
IMAGE = f"{REPOSITORY}@sha256:{'0' * 64}"
"""No container runs (kwok simulates pods), so the image is never pulled: a digest-pinned
name that resolves nowhere."""


def local_stack() -> StackConfig:
    return parse_stack_config(LOCAL_SETTINGS, STACK, REGION)


def _object(api_version: str, kind: str, name: str, namespace: str | None = None, **rest) -> dict:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata.update(rest.pop("metadata", {}))
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **rest}


def nodes(config: StackConfig) -> list[dict]:
    """The simulated nodes: each GPU group's maxSize nodes shaped like its instance type (the
    quota Kueue's flavor gives it, labelled and tainted as its launch template does), and one
    system node. kwok manages nodes carrying its annotation."""
    made = []
    for group in config.gpu_node_groups:
        allocatable = flavor_quota(replace(group, max_size=1))
        taint = {"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NoSchedule"}
        for index in range(group.max_size):
            name = f"{group.name}-{index}"
            made.append(
                _node(
                    name,
                    {
                        INSTANCE_TYPE_LABEL: group.instance.name,
                        # What EKS puts on a managed group's nodes (`compute.capacity` selects it).
                        CAPACITY_TYPE_LABEL: group.capacity_type,
                        **node_labels(group),
                    },
                    allocatable,
                    [taint],
                )
            )
    made.append(
        _node(
            "system-0",
            {INSTANCE_TYPE_LABEL: config.system_nodes.instance_type, **SYSTEM_NODE_LABELS},
            SYSTEM_ALLOCATABLE,
            [],
        )
    )
    return made


def _node(name: str, labels: dict, allocatable: dict, taints: list[dict]) -> dict:
    resources = {**allocatable, "pods": "110"}
    return _object(
        "v1",
        "Node",
        name,
        metadata={
            "labels": {
                **labels,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        spec={"taints": taints},
        status={"allocatable": resources, "capacity": resources},
    )


def stack_objects(config: StackConfig) -> list[dict]:
    """Namespace, NetworkPolicies, ServiceAccounts, the Training API's Role, the runtimes and
    Kueue's objects, in the order they can be created."""
    ns = config.namespace
    app = api_name(config.cluster.name)
    labels = api_labels(app)
    made = [
        _object("v1", "Namespace", ns, metadata={"labels": dict(POD_SECURITY_LABELS)}),
        _object(
            "networking.k8s.io/v1", "NetworkPolicy", DEFAULT_DENY_POLICY, ns, spec=DEFAULT_DENY_SPEC
        ),
        *(
            _object("v1", "ServiceAccount", account, ns, automountServiceAccountToken=False)
            for account in (config.service_account, config.data_prepare_service_account)
        ),
        _object("v1", "ServiceAccount", app, ns, metadata={"labels": labels}),
        _object(
            "rbac.authorization.k8s.io/v1",
            "Role",
            app,
            ns,
            metadata={"labels": labels},
            rules=[dict(rule) for rule in RBAC_RULES],
        ),
        _object(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            app,
            ns,
            metadata={"labels": labels},
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": app},
            subjects=[{"kind": "ServiceAccount", "name": app, "namespace": ns}],
        ),
        _object(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            app,
            ns,
            metadata={"labels": labels},
            spec=network_policy_spec(labels),
        ),
        *runtime_objects(config.gpu_node_groups, config.service_account),
        priority_class_object(),
    ]
    kueue = config.kueue
    if kueue:
        made += [
            *(
                _object(KUEUE_API, "ResourceFlavor", flavor, spec=spec)
                for flavor, spec in resource_flavors(config.gpu_node_groups)
            ),
            _object(
                KUEUE_API,
                "ClusterQueue",
                kueue.cluster_queue,
                spec=cluster_queue_spec(config.gpu_node_groups, kueue),
            ),
            _object(
                KUEUE_API,
                "LocalQueue",
                kueue.local_queue,
                ns,
                spec={"clusterQueue": kueue.cluster_queue},
            ),
            *(priority_class(name, value) for name, value in kueue.priority_classes),
        ]
    return made


def stack_outputs(config: StackConfig, kubeconfig: str) -> dict[str, Any]:
    """What `pulumi stack output` would print for the local stack (the keys infra exports that
    the stack file reads)."""
    return {
        "cluster_name": config.cluster.name,
        "region": config.region,
        "kubernetes_version": config.cluster.kubernetes_version,
        "kubeconfig": kubeconfig,
        "repository_url": REPOSITORY,
        "image": IMAGE,
        # job_defaults wants the S3 root a stack has; the local one swaps in a folder below.
        # The grants stay: what launch and data prepare check URLs against (no pod reads S3).
        "storage_root": f"s3://{BUCKET}/runs",
        "s3_grants": published_grants(BUCKET, config.data_access),
        "namespace": config.namespace,
        "service_account": config.service_account,
        "data_prepare_service_account": config.data_prepare_service_account,
        "gpu_node_groups": [
            {
                "name": g.name,
                "instance_type": g.instance.name,
                "min_size": g.min_size,
                "desired_size": g.desired_size,
                "max_size": g.max_size,
            }
            for g in config.gpu_node_groups
        ],
        "local_queue": config.kueue.local_queue if config.kueue else None,
        "job_api": config.training_operator,
        "approved_priorities": [name for name, _ in config.kueue.priority_classes]
        if config.kueue
        else None,
    }


def stack_file(config: StackConfig, kubeconfig_path: Path, runs: Path) -> str:
    """The stack file's text: infra.stack_defaults' own rendering, with the run dirs in a local
    folder (there is no S3 here)."""
    outputs = stack_outputs(config, kubeconfig_path.read_text())
    defaults = job_defaults(outputs, kubeconfig_path)
    defaults["storage"]["root"] = str(runs)
    return render(defaults, STACK).replace(
        "# re-run it after `pulumi up` instead of editing.",
        "# written by `make cluster-up` (localcluster); `make cluster-down` removes it.",
    )
