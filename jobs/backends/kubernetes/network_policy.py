"""The NetworkPolicy each run brings: its pods accept connections only from pods of the same run.

torchrun's c10d rendezvous store has no authentication and the dynamic rendezvous unpickles what
it reads from it, so a pod that can reach the master's port runs code with the trainer's role.
The training namespace denies all ingress by default (infra/cluster_addons.py); this policy opens
every port (the rendezvous port, and NCCL's and gloo's sockets, which take ephemeral ports) between
the pods labelled with this run's id, and nothing else. It is created before the job and owned by
it, so it lives and goes with the run. Pure: the same spec and cluster side give the same dict.
"""

from __future__ import annotations

import copy

from jobs.backends.kubernetes.client.kinds import KINDS
from jobs.backends.kubernetes.kubernetes_job import KubernetesJob
from jobs.spec import RUN_ID_LABEL, JobSpec


def network_policy_name(run_id: str) -> str:
    return f"{run_id}-peers"


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def job_network_policy(spec: JobSpec, kube: KubernetesJob) -> dict:
    """Same-run pods on every port; a kind whose operator calls its pods (KubeRay polls the
    head's Jobs API) also lets the operator's namespace in on that port alone."""
    same_run = {"matchLabels": {RUN_ID_LABEL: spec.name}}
    ingress: list[dict] = [{"from": [{"podSelector": copy.deepcopy(same_run)}]}]
    calls = KINDS[kube.api].operator_calls
    if calls is not None:
        namespace, port = calls
        operator = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}
        ingress.append({"from": [operator], "ports": [{"port": port, "protocol": "TCP"}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "annotations": dict(spec.annotations),
            "labels": dict(spec.labels),
            "name": network_policy_name(spec.name),
            "namespace": kube.namespace,
        },
        "spec": {
            "podSelector": same_run,
            "policyTypes": ["Ingress"],
            # A copy: one object twice would render as a YAML anchor and alias.
            "ingress": ingress,
        },
    }
