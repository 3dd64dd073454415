"""The settings of how a stack is operated (deploy path, autoscaler, data protection, Training
API, Capacity Block end), parsed like the rest of `infra.settings.stack`: one `ConfigError`
naming the key."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from infra.settings.reader import NAMESPACE, SettingsReader, fail
from infra.settings.types import (
    AutoscalerConfig,
    ClusterConfig,
    DataProtection,
    DeployConfig,
    TrainingApiConfig,
)

KMS_MAX_DELETION_DAYS = 30
DEPLOY_KEYS = ("githubUrl", "connectionArn", "pulumiTokenSecretArn", "policyArns", "timeoutMinutes")
TRAINING_API_KEYS = (
    "image",
    "tokenHashesSecretArn",
    "replicas",
    "internalLoadBalancer",
    "certificateArn",
    "tlsSecretName",
    "cpu",
    "memory",
    "admins",
)
AUTOSCALER_KEYS = ("scaleDownIdleMinutes", "provisioningRequests")

GITHUB_URL = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+?(\.git)?$")
CONNECTION_ARN = re.compile(
    r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[\w-]+:\d{12}:connection/"
)
_TOKEN_REFERENCE = re.compile(
    r"^arn:aws[a-z-]*:(secretsmanager:[\w-]+:\d{12}:secret:[\w/+=.@-]+"
    r"|ssm:[\w-]+:\d{12}:parameter/[\w/.-]+)$"
)
_SECRET_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[\w-]+:\d{12}:secret:[\w/+=.@-]+$")
_ACM_ARN = re.compile(r"^arn:aws[a-z-]*:acm:[\w-]+:\d{12}:certificate/[\w-]+$")
_USER_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A user name as the API records it: a Kubernetes label value (`trainstack.io/owner`)."""
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
"""A DNS-1123 subdomain: what a Secret's name may be (not a 63-character label)."""
_CPU = re.compile(r"^\d+(\.\d+)?m?$")
_MEMORY = re.compile(r"^\d+(Mi|Gi)$")
_POLICY_ARN = re.compile(r"^arn:aws[a-z-]*:iam::(aws|\d{12}):policy/[\w+=,.@/-]+$")


def capacity_block_end(reader: SettingsReader, capacity_block: bool) -> datetime | None:
    text = reader.get_str("capacityBlockEnd")
    if text is None:
        if capacity_block:
            raise fail(
                reader.key("capacityBlockEnd"),
                "required with capacityBlock: the block's end, e.g. 2026-12-01T11:30:00Z "
                "(the group scales to zero before it)",
            )
        return None
    if not capacity_block:
        raise fail(reader.key("capacityBlockEnd"), "only for capacityBlock: true")
    try:
        end = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise fail(
            reader.key("capacityBlockEnd"), f"{text!r}: expected UTC like 2026-12-01T11:30:00Z"
        ) from None
    return end


def parse_deploy(reader: SettingsReader, cluster: ClusterConfig) -> DeployConfig | None:
    values = reader.get_object("deploy")
    if values is None:
        if not cluster.public_access_cidrs:
            raise fail(
                reader.key("deploy"),
                "required when the API endpoint is private (no publicAccessCidrs): nothing "
                "outside the VPC can reach it, so set the in-VPC deploy (githubUrl, "
                "pulumiTokenSecretArn, policyArns) or list publicAccessCidrs",
            )
        return None
    deploy = SettingsReader(values, f"{NAMESPACE}:deploy.", DEPLOY_KEYS)
    url = deploy.get_str("githubUrl", required=True)
    if not GITHUB_URL.match(url):
        raise fail(deploy.key("githubUrl"), f"{url!r} is not https://github.com/<owner>/<repo>")
    connection = deploy.get_str("connectionArn")
    if connection is not None and not CONNECTION_ARN.match(connection):
        raise fail(deploy.key("connectionArn"), f"{connection!r} is not a CodeConnections ARN")
    token = deploy.get_str("pulumiTokenSecretArn", required=True)
    if not _TOKEN_REFERENCE.match(token):
        raise fail(
            deploy.key("pulumiTokenSecretArn"),
            f"{token!r}: a Secrets Manager secret ARN or SSM parameter ARN (the token itself "
            "never goes in config)",
        )
    policies = policy_arns(deploy, "policyArns")
    if not policies:
        raise fail(
            deploy.key("policyArns"), "required: IAM policy ARNs for creating the stack's resources"
        )
    return DeployConfig(
        github_url=url,
        connection_arn=connection,
        pulumi_token_secret_arn=token,
        policy_arns=policies,
        timeout_minutes=deploy.get_int("timeoutMinutes", 120, minimum=10),
    )


def policy_arns(reader: SettingsReader, key: str) -> tuple[str, ...]:
    """A list of IAM policy ARNs (empty when unset), each checked."""
    policies = tuple(reader.get_list(key))
    for index, policy in enumerate(policies):
        if not _POLICY_ARN.match(policy):
            raise fail(f"{reader.key(key)}[{index}]", f"{policy!r} is not a policy ARN")
    return policies


def parse_autoscaler(reader: SettingsReader) -> AutoscalerConfig:
    values = reader.get_object("autoscaler") or {}
    autoscaler = SettingsReader(values, f"{NAMESPACE}:autoscaler.", AUTOSCALER_KEYS)
    return AutoscalerConfig(
        scale_down_idle_minutes=autoscaler.get_int("scaleDownIdleMinutes", 10, minimum=1),
        provisioning_requests=autoscaler.get_bool("provisioningRequests", False),
    )


def parse_protection(reader: SettingsReader) -> DataProtection:
    window = reader.get_int("kmsDeletionWindowDays", KMS_MAX_DELETION_DAYS, minimum=7)
    if window > KMS_MAX_DELETION_DAYS:
        raise fail(reader.key("kmsDeletionWindowDays"), f"allowed: 7 to 30 days, got {window}")
    return DataProtection(reader.get_bool("protectData", True), window)


def parse_training_api(
    reader: SettingsReader, pinned_image: re.Pattern, repository: str
) -> TrainingApiConfig | None:
    """The API image lives in the trainer's repository under its own tags (`api-<sha>`), so
    the same pipeline and the same repository policy cover it."""
    values = reader.get_object("trainingApi")
    if values is None:
        return None
    api = SettingsReader(values, f"{NAMESPACE}:trainingApi.", TRAINING_API_KEYS)
    image = api.get_str("image", required=True)
    match = pinned_image.match(image)
    if not match or match["repository"] != repository:
        raise fail(api.key("image"), f"{image!r}: expected <registry>/{repository}@sha256:<digest>")
    secret = api.get_str("tokenHashesSecretArn", required=True)
    if not _SECRET_ARN.match(secret):
        raise fail(
            api.key("tokenHashesSecretArn"),
            f"{secret!r}: a Secrets Manager secret ARN holding {{name: sha256 of a token}} (no "
            "token or hash goes in config)",
        )
    cpu, memory = api.get_str("cpu", "500m"), api.get_str("memory", "1Gi")
    if not _CPU.match(cpu):
        raise fail(api.key("cpu"), f"{cpu!r}: a Kubernetes CPU quantity, e.g. 500m or 1")
    if not _MEMORY.match(memory):
        raise fail(api.key("memory"), f"{memory!r}: a Kubernetes memory quantity, e.g. 1Gi")
    internal = api.get_bool("internalLoadBalancer", False)
    certificate = api.get_str("certificateArn", None)
    tls_secret = api.get_str("tlsSecretName", None)
    if certificate is not None and not _ACM_ARN.match(certificate):
        raise fail(api.key("certificateArn"), f"{certificate!r}: an ACM certificate ARN")
    if certificate is not None and not internal:
        raise fail(
            api.key("certificateArn"),
            "the certificate is served by the internal NLB: set internalLoadBalancer: true (or "
            "use tlsSecretName for a ClusterIP service)",
        )
    if tls_secret is not None and not _DNS_SUBDOMAIN.match(tls_secret):
        raise fail(api.key("tlsSecretName"), f"{tls_secret!r}: a Kubernetes Secret name")
    if (certificate is None) == (tls_secret is None):
        raise fail(
            api.key("certificateArn"),
            "the API serves TLS only: set certificateArn (ACM, on the internal NLB) or "
            "tlsSecretName (a kubernetes.io/tls Secret in the namespace), one of the two",
        )
    admins = api.get_list("admins")
    for admin in admins:
        if not _USER_NAME.match(admin):
            raise fail(
                api.key("admins"),
                f"{admin!r}: a user name as in the token hashes secret (letters, digits, - _ ., "
                "at most 63, a letter or digit at both ends)",
            )
    if len(set(admins)) != len(admins):
        raise fail(api.key("admins"), "a name is listed twice")
    return TrainingApiConfig(
        image=image,
        admins=admins,
        token_hashes_secret_arn=secret,
        replicas=api.get_int("replicas", 2, minimum=1),
        internal_load_balancer=internal,
        certificate_arn=certificate,
        tls_secret_name=tls_secret,
        cpu=cpu,
        memory=memory,
    )
