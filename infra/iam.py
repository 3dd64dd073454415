"""Roles for AWS services, declared the same way everywhere: trust one principal, attach named
managed policies, optionally one inline policy."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.policies import assume_role_policy


def service_role(
    name: str,
    service: str,
    parent: pulumi.Resource,
    partition: str,
    managed_policies: tuple[str, ...] = (),
    inline_policy: pulumi.Input[str] | None = None,
    *,
    tag_session: bool = False,
    source_account: str | None = None,
    source_arn: str | None = None,
) -> aws.iam.Role:
    """`managed_policies` are AWS-managed policy names (arn:aws:iam::aws:policy/<name>)."""
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(
        name,
        assume_role_policy=assume_role_policy(
            service, tag_session=tag_session, source_account=source_account, source_arn=source_arn
        ),
        opts=child,
    )
    for policy in managed_policies:
        aws.iam.RolePolicyAttachment(
            f"{name}-{policy}",
            role=role.name,
            policy_arn=f"arn:{partition}:iam::aws:policy/{policy}",
            opts=child,
        )
    if inline_policy is not None:
        aws.iam.RolePolicy(f"{name}-inline", role=role.id, policy=inline_policy, opts=child)
    return role


def pod_identity_role(
    name: str,
    parent: pulumi.Resource,
    partition: str,
    account_id: str,
    cluster_name: pulumi.Input[str],
    namespace: pulumi.Input[str],
    service_account: pulumi.Input[str],
    inline_policy: pulumi.Input[str],
) -> tuple[aws.iam.Role, aws.eks.PodIdentityAssociation]:
    """A role that one ServiceAccount's pods assume through EKS Pod Identity (trust limited to
    this account), and the association binding it: depend on the association before the pods
    start, or they start without credentials."""
    role = service_role(
        name,
        "pods.eks.amazonaws.com",
        parent,
        partition,
        inline_policy=inline_policy,
        tag_session=True,
        source_account=account_id,
    )
    association = aws.eks.PodIdentityAssociation(
        name,
        cluster_name=cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.arn,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return role, association
