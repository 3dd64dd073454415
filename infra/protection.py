"""Resource options for what holds data (runs bucket, FSx, KMS keys), switched per stack."""

from __future__ import annotations

import pulumi

from infra.settings.types import DataProtection


def stateful(
    parent: pulumi.Resource, protection: DataProtection, **kwargs
) -> pulumi.ResourceOptions:
    """`protect` makes `pulumi up` refuse to replace, and `pulumi destroy` to delete, the
    resource; `retain_on_delete` keeps it in AWS even if someone unprotects and deletes it."""
    return pulumi.ResourceOptions(
        parent=parent,
        protect=protection.protect,
        retain_on_delete=protection.protect,
        **kwargs,
    )
