"""Serving in the stack, under Pulumi's mocks: the PriorityClass served models run at (above
training, never preempting it) and the Pod Identity role that reads one run's export and
nothing else, exported for the stack file."""

from __future__ import annotations

import json

import parliament

from catalog.kubernetes import SERVING_PRIORITY_CLASS
from infra.serving import SERVING_PRIORITY, priority_class_object, serving_policy

PRIORITY = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


def test_every_stack_creates_the_serving_priority_class(stack_runs):
    for stack, run in stack_runs.items():
        (declared,) = [
            r
            for r in run.of_type(PRIORITY)
            if r.inputs["metadata"]["name"] == SERVING_PRIORITY_CLASS
        ]
        assert declared.inputs["value"] == SERVING_PRIORITY > 0, stack  # training pods: 0
        assert declared.inputs["preemptionPolicy"] == "Never"
        assert not declared.inputs.get("globalDefault")


def test_the_priority_class_object_is_what_infra_declares():
    obj = priority_class_object()
    assert obj["metadata"]["name"] == SERVING_PRIORITY_CLASS
    assert obj["preemptionPolicy"] == "Never"
    assert 0 < obj["value"] < 1_000_000_000  # below the system classes


def test_the_serving_role_reads_only_the_tagged_runs_export(stack_runs):
    for stack, run in stack_runs.items():
        (policy,) = [r for r in run.of_type(ROLE_POLICY) if r.name.endswith("-serving-inline")]
        statements = json.loads(policy.inputs["policy"])["Statement"]
        actions = sorted(a for s in statements for a in [s["Action"]] if isinstance(a, str))
        assert actions == ["kms:Decrypt", "s3:GetObject", "s3:ListBucket"], stack
        (read,) = [s for s in statements if s["Action"] == "s3:GetObject"]
        assert read["Resource"].endswith(
            "/runs/${aws:PrincipalTag/kubernetes-service-account}/export/*"
        )
        for statement in statements:
            tags = statement["Condition"]["StringEquals"]
            assert tags["aws:PrincipalTag/kubernetes-namespace"] == "training"
            assert "aws:PrincipalTag/eks-cluster-name" in tags
        assert run.outputs["serving_role_arn"]


def test_the_serving_role_is_trusted_by_pod_identity_with_session_tags(stack_runs):
    for run in stack_runs.values():
        (role,) = [r for r in run.of_type("aws:iam/role:Role") if r.name.endswith("-serving")]
        trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        (statement,) = trust
        assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]


def test_the_listing_is_limited_to_the_export_prefix():
    doc = json.loads(serving_policy("aws", "bkt", "arn:aws:kms:::key/k", "training", "c"))
    (listing,) = [s for s in doc["Statement"] if s["Action"] == "s3:ListBucket"]
    prefixes = listing["Condition"]["StringLike"]["s3:prefix"]
    assert all(
        p.startswith("runs/${aws:PrincipalTag/kubernetes-service-account}/export/")
        for p in prefixes
    )


def test_parliament_matches_the_read_once_the_policy_variable_is_spelled_out():
    """Why test_iam_parliament allows serving-inline's RESOURCE_MISMATCH: the same policy with
    one run's name where the variable stands has no finding."""
    text = serving_policy("aws", "bkt", "arn:aws:kms:us-east-1:123456789012:key/k", "training", "c")
    spelled = text.replace("${aws:PrincipalTag/kubernetes-service-account}", "run-1")
    findings = parliament.analyze_policy_string(spelled).findings
    assert not [f for f in findings if f.issue == "RESOURCE_MISMATCH"], findings
    variable = parliament.analyze_policy_string(text).findings
    assert [f.issue for f in variable if f.issue == "RESOURCE_MISMATCH"]
