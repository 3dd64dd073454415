"""What served models need from the stack (`trainstack serve-model RUN backend=kubernetes`,
jobs/backends/kubernetes/serving.py): their PriorityClass and the role their pods read exports
with.

PriorityClass `trainstack-serving`: a value above every training pod's (they set no
priorityClassName: 0), so the scheduler never preempts a serving pod to place a training pod;
`preemptionPolicy: Never`, so a serving pod waits for free GPUs rather than evicting running
training. Kueue preempts only the workloads it admits, and serving is none of them.

The serving role: one role for every served run, trusted by EKS Pod Identity with session tags.
Its policy reads objects under `runs/${aws:PrincipalTag/kubernetes-service-account}/export/`
alone, and only for a session whose `kubernetes-namespace` tag is the training namespace and
whose `eks-cluster-name` tag is this cluster: serve-model names each run's ServiceAccount after
the run and binds it to this role (a Pod Identity association per run, removed on take-down),
so a serving pod may read its own run's export and nothing else — no other run, no checkpoint,
no dataset, and no write anywhere.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from catalog.kubernetes import SERVING_PRIORITY_CLASS
from infra.bucket_layout import RUNS
from infra.iam import service_role
from infra.policies import policy_document

SERVING_PRIORITY = 1000
"""Above training pods (0), far below the system classes (2,000,000,000 and up)."""
EXPORT = "export"
ACCOUNT_TAG = "${aws:PrincipalTag/kubernetes-service-account}"
"""Pod Identity's session tag naming the pod's ServiceAccount (the served run's id)."""


def priority_class_object() -> dict:
    """Pure: the PriorityClass served models' pods run at (not the global default: every
    other pod keeps priority 0; `globalDefault` left out, as the API server stores false)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": SERVING_PRIORITY_CLASS},
        "value": SERVING_PRIORITY,
        "preemptionPolicy": "Never",
        "description": "trainstack serve-model: never preempted by training, never preempts it",
    }


def serving_policy(
    partition: str, bucket: str, bucket_key_arn: str, namespace: str, cluster_name: str
) -> str:
    """Pure: read one run's export (the session's ServiceAccount names the run), list it, and
    decrypt it; for pods of `namespace` on `cluster_name` only."""
    sessions = {
        "StringEquals": {
            "aws:PrincipalTag/kubernetes-namespace": namespace,
            "aws:PrincipalTag/eks-cluster-name": cluster_name,
        }
    }
    prefix = f"{RUNS}/{ACCOUNT_TAG}/{EXPORT}"
    return policy_document(
        [
            {
                "Sid": "ReadOwnExport",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"arn:{partition}:s3:::{bucket}/{prefix}/*",
                "Condition": sessions,
            },
            {
                "Sid": "ListOwnExport",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:{partition}:s3:::{bucket}",
                "Condition": {
                    **sessions,
                    "StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]},
                },
            },
            {
                "Sid": "DecryptExport",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": bucket_key_arn,
                "Condition": sessions,
            },
        ]
    )


class Serving(pulumi.ComponentResource):
    role_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster_name: pulumi.Input[str],
        namespace: pulumi.Input[str],
        partition: str,
        account_id: str,
        bucket: pulumi.Input[str],
        bucket_key_arn: pulumi.Input[str],
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:Serving", name, None, opts)
        obj = priority_class_object()
        k8s.scheduling.v1.PriorityClass(
            f"{name}-serving-priority",
            metadata=obj["metadata"],
            value=obj["value"],
            preemption_policy=obj["preemptionPolicy"],
            description=obj["description"],
            opts=pulumi.ResourceOptions(parent=self, provider=k8s_provider),
        )
        policy = pulumi.Output.all(bucket, bucket_key_arn, namespace, cluster_name).apply(
            lambda args: serving_policy(partition, *args)
        )
        role: aws.iam.Role = service_role(
            f"{name}-serving",
            "pods.eks.amazonaws.com",
            self,
            partition,
            inline_policy=policy,
            tag_session=True,
            source_account=account_id,
        )
        self.role_arn = role.arn
        self.register_outputs({"role_arn": self.role_arn})
