"""The identities pods run as, one per owner of the bucket layout (infra/bucket_layout.py): a
ServiceAccount per pod role, bound by EKS Pod Identity to a role holding that role's grants
(plus `trainstack:dataAccess`) and the right to pull the trainer image."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.bucket_layout import DATA_PREPARE, TRAINING, Grant, pod_grants
from infra.iam import pod_identity_role
from infra.policies import training_policy

ROLE_SUFFIXES = {TRAINING: "trainer", DATA_PREPARE: "data-prepare"}
"""Resource-name suffix of each pod role (`trainer` kept: renaming would replace the role)."""


class TrainingIdentity(pulumi.ComponentResource):
    service_account: pulumi.Output[str]
    role_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster_name: pulumi.Input[str],
        namespace: pulumi.Input[str],
        service_accounts: dict[str, str],
        partition: str,
        account_id: str,
        bucket: pulumi.Input[str],
        bucket_key_arn: pulumi.Input[str],
        repository_arn: pulumi.Input[str],
        k8s_provider: k8s.Provider,
        data_access: tuple[Grant, ...] = (),
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`service_accounts`: pod role (bucket_layout.POD_ROLES) -> ServiceAccount name."""
        super().__init__("trainstack:infra:TrainingIdentity", name, None, opts)
        self.service_accounts: dict[str, pulumi.Output[str]] = {}
        self.role_arns: dict[str, pulumi.Output[str]] = {}
        for role_name, account_name in service_accounts.items():
            suffix = ROLE_SUFFIXES[role_name]

            def policy(args: list[str], role_name: str = role_name) -> str:
                bucket_name, key_arn, repo_arn = args
                grants = pod_grants(role_name, bucket_name, data_access)
                return training_policy(partition, grants, key_arn, repo_arn)

            account = k8s.core.v1.ServiceAccount(
                f"{name}-{suffix}",
                metadata={"name": account_name, "namespace": namespace},
                # Pods of both roles reach AWS through Pod Identity's own token and never call
                # the Kubernetes API: no API token is mounted (pods also say so themselves).
                automount_service_account_token=False,
                opts=pulumi.ResourceOptions(parent=self, provider=k8s_provider),
            )
            role, _ = pod_identity_role(
                f"{name}-{suffix}",
                self,
                partition,
                account_id,
                cluster_name,
                namespace,
                account.metadata.name,
                inline_policy=pulumi.Output.all(bucket, bucket_key_arn, repository_arn).apply(
                    policy
                ),
            )
            self.service_accounts[role_name] = account.metadata.name
            self.role_arns[role_name] = role.arn
        self.service_account = self.service_accounts[TRAINING]
        self.role_arn = self.role_arns[TRAINING]
        self.register_outputs({"service_account": self.service_account})
