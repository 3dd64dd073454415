"""The training namespace enforces the Pod Security Standard the rendered pods meet."""

from __future__ import annotations

NAMESPACE = "kubernetes:core/v1:Namespace"


def test_training_namespace_enforces_restricted(stack_runs):
    for run in stack_runs.values():
        (namespace,) = [
            n for n in run.of_type(NAMESPACE) if n.inputs["metadata"]["name"] == "training"
        ]
        labels = namespace.inputs["metadata"]["labels"]
        for mode in ("enforce", "audit", "warn"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
