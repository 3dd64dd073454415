"""Logs that outlive pods: Fluent Bit (AWS's `aws-for-fluent-bit` chart, pinned in
`infra.settings.versions`) on every node ships the training namespace's container logs to one
CloudWatch Logs group that this stack owns, with the stack's retention
(`trainstack:logRetentionDays`).

Fluent Bit, not the CloudWatch Observability add-on: the add-on also runs the CloudWatch agent
(Container Insights metrics, Application Signals) and ships host and data-plane logs to groups
it creates itself, which needs CloudWatchAgentServerPolicy. Here the DaemonSet's role may only
create streams in, and write to, this one group, and the group is declared here (retention set,
deleted with the stack) instead of auto-created by the shipper.

Each stream is `<pod>.<container>` (the chart's `logStreamTemplate`): `trainstack logs` reads a
rank's archived log by its pod's name once the pod is gone
(jobs/backends/kubernetes/client/archived_logs.py).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.cluster_addons import GPU_TOLERATION, helm_release
from infra.iam import pod_identity_role
from infra.policies import policy_document
from infra.settings.versions import FLUENT_BIT

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "aws-for-fluent-bit"
STREAM_TEMPLATE = "$kubernetes['pod_name'].$kubernetes['container_name']"
"""Must match jobs/backends/kubernetes/client/archived_logs.py's stream_name
(`<pod>.<container>`)."""


def log_group_name(cluster_name: str) -> str:
    return f"/aws/eks/{cluster_name}/containers"


def log_writer_policy(log_group_arn: str, account_id: str) -> str:
    """Create streams in and write to the one group; nothing else (no group creation, no
    retention change, no reads)."""
    return policy_document(
        [
            {
                "Sid": "WriteContainerLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": [log_group_arn, f"{log_group_arn}:log-stream:*"],
                "Condition": {"StringEquals": {"aws:ResourceAccount": account_id}},
            }
        ]
    )


def fluent_bit_values(log_group: str, region: str, namespace: str) -> dict:
    return {
        # Only the training namespace's containers (file names are <pod>_<namespace>_<c>-<id>).
        "input": {"path": f"/var/log/containers/*_{namespace}_*.log"},
        "cloudWatchLogs": {
            "enabled": True,
            "region": region,
            "logGroupName": log_group,
            "logGroupTemplate": None,  # the chart's default routes per namespace: one group
            "logStreamTemplate": STREAM_TEMPLATE,
            # Ship the line itself, not Fluent Bit's JSON record around it.
            "logKey": "log",
            "autoCreateGroup": False,
            "logRetentionDays": None,  # set on the group by this stack
        },
        "cloudWatch": {"enabled": False},  # the chart's older Go plugin
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        # Training pods run on GPU nodes: the shipper must run there too.
        "tolerations": [GPU_TOLERATION],
        "priorityClassName": "system-node-critical",
    }


class ContainerLogs(pulumi.ComponentResource):
    log_group: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster_name: pulumi.Output[str],
        region: str,
        partition: str,
        account_id: str,
        namespace: pulumi.Input[str],
        retention_days: int,
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:ContainerLogs", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        group = aws.cloudwatch.LogGroup(
            f"{name}-container-logs",
            name=cluster_name.apply(log_group_name),
            retention_in_days=retention_days,
            opts=child,
        )
        role, association = pod_identity_role(
            f"{name}-fluent-bit",
            self,
            partition,
            account_id,
            cluster_name,
            NAMESPACE,
            SERVICE_ACCOUNT,
            inline_policy=group.arn.apply(lambda arn: log_writer_policy(arn, account_id)),
        )
        helm_release(
            name,
            FLUENT_BIT,
            NAMESPACE,
            pulumi.Output.all(group.name, namespace).apply(
                lambda args: fluent_bit_values(args[0], region, args[1])
            ),
            # Credentials and the group exist before the first write.
            pulumi.ResourceOptions(
                parent=self, provider=k8s_provider, depends_on=[association, group]
            ),
        )
        self.log_group = group.name
        self.role_arn = role.arn
        self.register_outputs({"log_group": self.log_group})
