"""parliament (the IAM linter, with its community auditors) over every IAM document both example
stacks create under Pulumi's mocks: role inline policies, managed policies, trust policies,
bucket, key and repository policies. Any finding not in ALLOWED fails; ALLOWED says why each
one stands. The mocks answer with each resource type's real ARN shape, so parliament matches
actions to resources as it would for the deployed stack."""

from __future__ import annotations

import json
from dataclasses import dataclass

import parliament
import pytest

from tests.infra.pulumi_harness import StackRun


@dataclass(frozen=True)
class Document:
    stack: str
    resource: str  # the logical name, stack prefix dropped: "trainer-inline"
    field: str
    text: str
    community: bool = True
    """Run parliament's community auditors too: they judge what a principal may do, so not on
    a trust policy, which only says who may assume the role (they would report its
    sts:AssumeRole* as CREDENTIALS_EXPOSURE in every role)."""


@dataclass(frozen=True)
class Allowed:
    issue: str
    resource: str
    actions: tuple[str, ...]  # exactly the actions parliament names (lowercased as it reports)
    why: str


# Each entry names the document and the exact actions; a new action under the same issue fails.
ALLOWED = [
    *[
        Allowed(
            "CREDENTIALS_EXPOSURE",
            role,
            ("ecr:getauthorizationtoken",),
            "Pulling or pushing an ECR image needs a registry token; the action takes only "
            "Resource '*'. The repositories themselves are granted by ARN.",
        )
        for role in ("trainer-inline", "data-prepare-inline", "codebuild-inline", "pr-build-inline")
    ],
    Allowed(
        "RESOURCE_STAR",
        "autoscaler-inline",
        ("eks:DescribeNodegroup",),
        "cluster-autoscaler discovers node groups by tag, not by a list of ARNs; the call is "
        "read-only.",
    ),
    Allowed(
        "RESOURCE_STAR",
        "autoscaler-inline",
        ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"),
        "Conditioned on the cluster's `owned` ASG tag (cluster-autoscaler's documented policy); "
        "node groups' ASG names are only known after EKS creates them.",
    ),
    Allowed(
        "RESOURCE_STAR",
        "deploy-inline",
        ("ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface"),
        "CodeBuild's VPC permissions: the interface does not exist before the call, EC2 scopes "
        "neither to one (the attach permission is limited to the deploy subnets).",
    ),
    Allowed(
        "PERMISSIONS_MANAGEMENT_ACTIONS",
        "deploy-inline",
        ("ec2:createnetworkinterfacepermission",),
        "CodeBuild attaches its interface to the deploy subnets through it; limited to "
        "codebuild.amazonaws.com, the deploy subnets and the account's interfaces.",
    ),
    *[
        Allowed(
            "UNKNOWN_FEDERATION_SOURCE",
            role,
            ("arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com",),
            "parliament knows SAML providers and four web identity hosts, not IAM OIDC "
            "providers; GitHub's OIDC provider is the documented principal for Actions.",
        )
        for role in ("gha-preview", "gha-build", "gha-deployer")
    ],
    *[
        Allowed(
            "UNKNOWN_CONDITION_FOR_ACTION",
            role,
            (
                f"Unknown condition token.actions.githubusercontent.com:{key} for action "
                "sts:AssumeRoleWithWebIdentity",
            ),
            "An OIDC provider's own claims (aud, sub) are the keys AWS documents for "
            "AssumeRoleWithWebIdentity; parliament's table lists only global and STS keys. "
            "They are what ties the role to this repository's branches and environments.",
        )
        for role in ("gha-preview", "gha-build", "gha-deployer")
        for key in ("aud", "sub")
    ],
    Allowed(
        "RESOURCE_STAR",
        "bucket-key",
        (  # every key-scoped action of kms:*, as parliament lists them
            "kms:CancelKeyDeletion",
            "kms:CreateAlias",
            "kms:CreateGrant",
            "kms:Decrypt",
            "kms:DeleteAlias",
            "kms:DeleteImportedKeyMaterial",
            "kms:DeriveSharedSecret",
            "kms:DescribeKey",
            "kms:DisableKey",
            "kms:DisableKeyRotation",
            "kms:EnableKey",
            "kms:EnableKeyRotation",
            "kms:Encrypt",
            "kms:GenerateDataKey",
            "kms:GenerateDataKeyPair",
            "kms:GenerateDataKeyPairWithoutPlaintext",
            "kms:GenerateDataKeyWithoutPlaintext",
            "kms:GenerateMac",
            "kms:GetKeyPolicy",
            "kms:GetKeyRotationStatus",
            "kms:GetParametersForImport",
            "kms:GetPublicKey",
            "kms:ImportKeyMaterial",
            "kms:ListGrants",
            "kms:ListKeyPolicies",
            "kms:ListKeyRotations",
            "kms:ListResourceTags",
            "kms:PutKeyPolicy",
            "kms:ReEncryptFrom",
            "kms:ReEncryptTo",
            "kms:ReplicateKey",
            "kms:RetireGrant",
            "kms:RevokeGrant",
            "kms:RotateKeyOnDemand",
            "kms:ScheduleKeyDeletion",
            "kms:Sign",
            "kms:SynchronizeMultiRegionKey",
            "kms:TagResource",
            "kms:UntagResource",
            "kms:UpdateAlias",
            "kms:UpdateKeyDescription",
            "kms:UpdatePrimaryRegion",
            "kms:Verify",
            "kms:VerifyMac",
        ),
        "KMS's default key-policy statement: the account's root, so IAM policies govern the "
        "key. In a key policy Resource '*' means this key.",
    ),
    Allowed(
        "PERMISSIONS_MANAGEMENT_ACTIONS",
        "bucket-key",
        (
            "kms:creategrant",
            "kms:createkey",
            "kms:putkeypolicy",
            "kms:retiregrant",
            "kms:revokegrant",
        ),
        "The same default statement (`kms:*` to the account's root), without which the key "
        "could become unmanageable; no other principal gets these.",
    ),
    Allowed(
        "RESOURCE_STAR",
        "bucket-key",
        (
            "kms:Decrypt",
            "kms:Encrypt",
            "kms:GenerateDataKey",
            "kms:GenerateDataKeyPair",
            "kms:GenerateDataKeyPairWithoutPlaintext",
            "kms:GenerateDataKeyWithoutPlaintext",
            "kms:ReEncryptFrom",
            "kms:ReEncryptTo",
        ),
        "FSx's S3-access role through S3 for this bucket only (conditions); '*' is this key.",
    ),
    Allowed(
        "RESOURCE_STAR",
        "bucket-key",
        ("kms:DescribeKey",),
        "FSx's S3-access role, through S3 from this account only; '*' is this key.",
    ),
    Allowed(
        "RESOURCE_MISMATCH",
        "serving-inline",
        ("s3:GetObject",),
        "The object ARN holds the policy variable ${aws:PrincipalTag/kubernetes-service-account} "
        "(one run's export per Pod Identity session, infra/serving.py); parliament parses the "
        "variable's ':' as an ARN separator and no longer sees an S3 object ARN. Without the "
        "variable the same statement matches (tests/infra/test_infra_serving.py).",
    ),
]
ALLOWED = [Allowed(a.issue, a.resource, tuple(sorted(a.actions)), a.why) for a in ALLOWED]

IDENTITY_POLICIES = {"aws:iam/rolePolicy:RolePolicy", "aws:iam/policy:Policy"}
RESOURCE_POLICIES = {
    "aws:s3/bucketPolicy:BucketPolicy",
    "aws:kms/keyPolicy:KeyPolicy",
    "aws:kms/key:Key",
}


def _with_resource(document: str, resource: str) -> str:
    """A policy whose resource is implicit (a role's trust policy, a repository policy), with
    that resource made explicit: parliament reads only documents with a Resource element."""
    parsed = json.loads(document)
    statements = parsed["Statement"]
    for statement in statements if isinstance(statements, list) else [statements]:
        statement.setdefault("Resource", resource)
    return json.dumps(parsed)


def documents(label: str, run: StackRun, stack: str) -> list[Document]:
    """Every IAM document the run declared, as parliament should read it."""
    prefix = f"trainstack-{stack}-"
    found = []

    def add(resource, field, text, community=True):
        name = resource.name.removeprefix(prefix)
        found.append(Document(label, name, field, text, community))

    for resource in run.resources:
        inputs = resource.inputs
        if resource.type in IDENTITY_POLICIES | RESOURCE_POLICIES and inputs.get("policy"):
            add(resource, "policy", inputs["policy"])
        elif resource.type == "aws:iam/role:Role":
            add(
                resource,
                "assumeRolePolicy",
                _with_resource(inputs["assumeRolePolicy"], resource.state["arn"]),
                community=False,
            )
            for inline in inputs.get("inlinePolicies") or []:
                add(resource, f"inlinePolicies/{inline.get('name')}", inline["policy"])
        elif resource.type == "aws:ecr/repositoryPolicy:RepositoryPolicy":
            arn = f"arn:aws:ecr:us-east-1:123456789012:repository/{inputs['repository']}"
            add(resource, "policy", _with_resource(inputs["policy"], arn))
    return found


def _actions(finding) -> tuple[str, ...]:
    detail, location = finding.detail, finding.location
    if isinstance(detail, list):
        return tuple(sorted(d["action"] if isinstance(d, dict) else str(d) for d in detail))
    if isinstance(location, dict) and "actions" in location:
        return tuple(sorted(location["actions"]))
    return (str(detail),)


def findings(document: Document) -> list[tuple[str, str, tuple[str, ...]]]:
    policy = parliament.analyze_policy_string(
        document.text, include_community_auditors=document.community
    )
    return [(f.issue, document.resource, _actions(f)) for f in policy.findings]


def unexpected(document: Document) -> list[tuple]:
    allowed = {(a.issue, a.resource, a.actions) for a in ALLOWED}
    return [f for f in findings(document) if f not in allowed]


@pytest.fixture(scope="module")
def stack_documents(stack_runs, api_stack_run) -> list[Document]:
    """Both example stacks, and dev with the Training API (its pods' role)."""
    runs = {**stack_runs, "dev+api": api_stack_run}
    return [
        doc for label, run in runs.items() for doc in documents(label, run, label.split("+")[0])
    ]


def test_every_kind_of_document_is_scanned(stack_documents):
    """Role inline policies, trust policies, the bucket's, the key's (prod) and the
    repositories' policies of both stacks."""
    scanned = {(d.stack, d.resource, d.field) for d in stack_documents}
    for stack in ("dev", "prod"):
        assert (stack, "trainer-inline", "policy") in scanned
        assert (stack, "trainer", "assumeRolePolicy") in scanned
        assert (stack, "release-writers", "policy") in scanned
        assert (stack, "runs", "policy") in scanned  # the bucket's
    assert ("prod", "bucket-key", "policy") in scanned
    assert ("dev+api", "api-inline", "policy") in scanned


def test_no_finding_outside_the_allow_list(stack_documents):
    problems = [(d.stack, d.resource, d.field, f) for d in stack_documents for f in unexpected(d)]
    assert not problems, "\n".join(map(str, problems))


def test_every_allow_list_entry_still_applies(stack_documents):
    seen = {f for d in stack_documents for f in findings(d)}
    stale = [a for a in ALLOWED if (a.issue, a.resource, a.actions) not in seen]
    assert not stale, stale


@pytest.mark.parametrize(
    "planted, issue",
    [
        ({"Effect": "Allow", "Action": "s3:GetObjcet", "Resource": "*"}, "UNKNOWN_ACTION"),
        ({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}, "RESOURCE_STAR"),
        (
            {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"},
            "PERMISSIONS_MANAGEMENT_ACTIONS",
        ),
    ],
)
def test_a_planted_statement_is_caught(stack_documents, planted, issue):
    """The scan can fail: a bad statement added to the trainer's policy is reported."""
    (trainer,) = [d for d in stack_documents if d.stack == "dev" and d.resource == "trainer-inline"]
    assert not unexpected(trainer)
    parsed = json.loads(trainer.text)
    parsed["Statement"].append(planted)
    bad = Document(trainer.stack, trainer.resource, trainer.field, json.dumps(parsed))
    assert issue in {f[0] for f in unexpected(bad)}
