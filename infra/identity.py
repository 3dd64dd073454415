"""The identity training pods run as: a ServiceAccount bound by EKS Pod Identity to a role that
may read and write only `<bucket>/runs/*` and pull the trainer image."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.iam import service_role
from infra.policies import RUNS_PREFIX, training_policy


class TrainingIdentity(pulumi.ComponentResource):
    service_account: pulumi.Output[str]
    role_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster_name: pulumi.Input[str],
        namespace: pulumi.Input[str],
        service_account: str,
        partition: str,
        account_id: str,
        bucket_arn: pulumi.Input[str],
        bucket_key_arn: pulumi.Input[str],
        repository_arn: pulumi.Input[str],
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:TrainingIdentity", name, None, opts)
        role = service_role(
            f"{name}-trainer",
            "pods.eks.amazonaws.com",
            self,
            partition,
            inline_policy=pulumi.Output.all(bucket_arn, bucket_key_arn, repository_arn).apply(
                lambda arns: training_policy(arns[0], RUNS_PREFIX, arns[1], arns[2])
            ),
            tag_session=True,
            source_account=account_id,
        )
        account = k8s.core.v1.ServiceAccount(
            f"{name}-trainer",
            metadata={"name": service_account, "namespace": namespace},
            opts=pulumi.ResourceOptions(parent=self, provider=k8s_provider),
        )
        aws.eks.PodIdentityAssociation(
            f"{name}-trainer",
            cluster_name=cluster_name,
            namespace=namespace,
            service_account=account.metadata.name,
            role_arn=role.arn,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.service_account = account.metadata.name
        self.role_arn = role.arn
        self.register_outputs({"service_account": self.service_account})
