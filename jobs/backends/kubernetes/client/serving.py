"""A served model's objects on the cluster (jobs/backends/kubernetes/serving.py renders them):
server-side applied in order, and taken down by label, through `Cluster.call` (one-line
errors, bounded retries). Like every other write, an object of the same name that trainstack
did not make is refused and left as it is (ownership.ensure_ours); the take-down deletes only
what the serving labels and the managed-by label select together.

Pod Identity: on EKS the serving role reaches a pod only through an association for its
ServiceAccount (one per served run, made here when the stack gives `cluster.serving_role_arn`
and removed on take-down; jobs/backends/kubernetes/serving.py says what the role may read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobs.backends.kubernetes.client.api import Cluster, ClusterError
from jobs.backends.kubernetes.client.ownership import ensure_ours

FIELD_MANAGER = "trainstack"
Resources = Callable[[str, str], Any]
"""(apiVersion, kind) -> a kubernetes.dynamic Resource (tests pass their own)."""


def dynamic_resources(cluster: Cluster) -> Resources:
    from kubernetes.dynamic import DynamicClient  # lazy: start-up (kubernetes client)

    client = DynamicClient(cluster.core.api_client)
    return lambda api_version, kind: client.resources.get(api_version=api_version, kind=kind)


def _plain(obj: Any) -> dict:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def apply(cluster: Cluster, manifests: list[dict], resources: Resources) -> list[str]:
    """Server-side apply each manifest in order; `Kind/name` of each, as applied."""
    applied = []
    for manifest in manifests:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        where = f"{kind} {cluster.namespace}/{name}"
        resource = resources(manifest["apiVersion"], kind)
        existing = cluster.call_or_none(
            f"get {where}", resource.get, name=name, namespace=cluster.namespace
        )
        ensure_ours(kind, cluster.namespace, name, None if existing is None else _plain(existing))
        cluster.call(
            f"apply {where}",
            resource.server_side_apply,
            body=manifest,
            name=name,
            namespace=cluster.namespace,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        applied.append(f"{kind}/{name}")
    return applied


def take_down(
    cluster: Cluster, kinds: tuple[tuple[str, str], ...], selector: str, resources: Resources
) -> list[str]:
    """Delete every object of `kinds` that `selector` picks (it names the managed-by label);
    `Kind/name` of each deleted. Nothing there is not an error (an idempotent take-down)."""
    deleted = []
    for api_version, kind in kinds:
        resource = resources(api_version, kind)
        listing = cluster.call(
            f"list {kind}s in {cluster.namespace}",
            resource.get,
            namespace=cluster.namespace,
            label_selector=selector,
        )
        for item in _plain(listing).get("items") or []:
            name = item["metadata"]["name"]
            ensure_ours(kind, cluster.namespace, name, item)
            gone = cluster.call_or_none(
                f"delete {kind} {cluster.namespace}/{name}",
                resource.delete,
                name=name,
                namespace=cluster.namespace,
                body={"propagationPolicy": "Foreground"},
            )
            if gone is not None:
                deleted.append(f"{kind}/{name}")
    return deleted


def _eks(region: str | None) -> Any:
    import boto3  # lazy: start-up

    return boto3.client("eks", region_name=region)


def associate(
    cluster_name: str, namespace: str, account: str, role_arn: str, region: str | None, eks=None
) -> str:
    """Bind `role_arn` to ServiceAccount `namespace/account` (EKS Pod Identity); the
    association's id. One already there for the account is kept when it names the role."""
    eks = eks or _eks(region)
    try:
        for found in _associations(eks, cluster_name, namespace, account):
            described = eks.describe_pod_identity_association(
                clusterName=cluster_name, associationId=found["associationId"]
            )["association"]
            if described["roleArn"] != role_arn:
                raise ClusterError(
                    f"ServiceAccount {namespace}/{account} is bound to {described['roleArn']} "
                    f"(Pod Identity), not the serving role {role_arn}: left as it is"
                )
            return found["associationId"]
        made = eks.create_pod_identity_association(
            clusterName=cluster_name,
            namespace=namespace,
            serviceAccount=account,
            roleArn=role_arn,
            tags={"trainstack.io/component": "serving"},
        )
    except ClusterError:
        raise
    except Exception as exc:  # botocore's ClientError, NoCredentialsError, ...
        raise ClusterError(f"EKS Pod Identity for {namespace}/{account}: {exc}") from exc
    return made["association"]["associationId"]


def dissociate(
    cluster_name: str, namespace: str, account: str, region: str | None, eks=None
) -> int:
    """Remove the Pod Identity associations of ServiceAccount `namespace/account`; how many."""
    eks = eks or _eks(region)
    try:
        found = _associations(eks, cluster_name, namespace, account)
        for association in found:
            eks.delete_pod_identity_association(
                clusterName=cluster_name, associationId=association["associationId"]
            )
    except Exception as exc:
        raise ClusterError(f"EKS Pod Identity for {namespace}/{account}: {exc}") from exc
    return len(found)


def _associations(eks, cluster_name: str, namespace: str, account: str) -> list[dict]:
    listed = eks.list_pod_identity_associations(
        clusterName=cluster_name, namespace=namespace, serviceAccount=account
    )
    return list(listed.get("associations") or [])
