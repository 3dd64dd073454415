"""Kubeflow Trainer v2 in the cluster: its pinned Helm chart (the controller, the TrainJob and
runtime CRDs, and JobSet as the chart's dependency) and trainstack's ClusterTrainingRuntimes,
one per GPU node group and a CPU one.

The runtimes are what jobs/backends/kubernetes/runtimes.py builds from the instance catalog: the
same function the
job tests check TrainJobs against, so the stack and the jobs cannot drift apart. Trainer's
own example runtimes (`runtimes.defaultEnabled`) stay off: jobs only run on trainstack's.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.cluster_addons import helm_release
from infra.settings.types import GpuNodeGroupConfig
from infra.settings.versions import KUBEFLOW_TRAINER
from jobs.backends.kubernetes.manifest_checks import check_jobset_webhook
from jobs.backends.kubernetes.runtimes import cluster_training_runtimes

TRAINER_NAMESPACE = "kubeflow-system"
TRAINJOB_API = "trainjob"
"""The stack output `job_api` of a stack with Kubeflow Trainer: jobs default to TrainJobs."""


def trainer_values() -> dict:
    """Chart values: JobSet with it (its pinned dependency), no example runtimes."""
    return {"jobset": {"install": True}, "runtimes": {"defaultEnabled": False}}


def runtime_objects(groups: tuple[GpuNodeGroupConfig, ...], service_account: str) -> list[dict]:
    """Pure: every ClusterTrainingRuntime the stack installs, each passing JobSet's webhook
    rules (a runtime it refuses starts no TrainJob, and the refusal is only an event)."""
    pairs = [(group.name, group.instance) for group in groups]
    runtimes = cluster_training_runtimes(pairs, service_account=service_account)
    for runtime in runtimes:
        check_jobset_webhook(runtime)
    return runtimes


RUNTIME_REPLACE = pulumi.ResourceOptions(replace_on_changes=["spec"], delete_before_replace=True)
"""A changed runtime is deleted, then created again, never updated in place: Trainer's CRD
makes the JobSet template's `failurePolicy` (and more of the spec) immutable (a CEL rule,
kubeflow/trainer v2.3.0 manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml),
so an update is refused. Same name both times (TrainJobs name it), hence delete first; running
TrainJobs keep their JobSets, new ones wait for the new runtime."""


class KubeflowTrainer(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    runtime_names: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        groups: tuple[GpuNodeGroupConfig, ...],
        service_account: str,
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:KubeflowTrainer", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=k8s_provider)
        self.release = helm_release(
            name,
            KUBEFLOW_TRAINER,
            TRAINER_NAMESPACE,
            trainer_values(),
            in_cluster,
            create_namespace=True,
        )
        after_crds = pulumi.ResourceOptions.merge(
            in_cluster, pulumi.ResourceOptions(depends_on=[self.release])
        )
        runtime_opts = pulumi.ResourceOptions.merge(after_crds, RUNTIME_REPLACE)
        runtimes = [
            k8s.apiextensions.CustomResource(
                f"{name}-runtime-{runtime['metadata']['name']}",
                api_version=runtime["apiVersion"],
                kind=runtime["kind"],
                metadata=runtime["metadata"],
                spec=runtime["spec"],
                opts=runtime_opts,
            )
            for runtime in runtime_objects(groups, service_account)
        ]
        self.runtime_names = pulumi.Output.all(*[r.metadata["name"] for r in runtimes])
        self.register_outputs({"runtime_names": self.runtime_names})
