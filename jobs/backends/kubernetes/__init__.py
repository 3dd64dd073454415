"""The kubernetes backend's home: its traits and options (here: light, read without importing
the rest), the backend (`backend`), a job's cluster side (`kubernetes_job`: namespace, job
kind, replicas, run policy, runtime...), the job kinds it submits (`job_kinds`: `manifests` for
the PyTorchJob and the pod pieces both kinds share, `trainjob`), the renderers (`runtimes`,
`network_policy`, `data_prepare`) and the light modules under them (`pod_facts`: a pod's share
of its instance, its platform env, runtime names; `pod_parts`: volumes, resources, security
contexts), the schema checks (`manifest_checks`) and the cluster client (`client`, which never
imports a backend). Choosing another backend loads none of the rest; rendering runtimes in
`pulumi up` loads `runtimes`, `pod_facts`, `pod_parts`, `manifest_checks` and `client.kinds`
only."""

from dataclasses import dataclass

from jobs.backends.traits import BackendOptions, BackendTraits


@dataclass
class KubernetesOptions(BackendOptions):
    name: str = "kubernetes"
    preflight: bool = True
    """Check CRD, nodes and namespace before submitting (`--skip-preflight`)."""


TRAITS = BackendTraits(
    name="kubernetes",
    describe="submit to the cluster in cluster.* (kubeconfig/context from config or the stack)",
    options=KubernetesOptions,
    pods=True,
    schema_checks_required=True,
    on_cluster=True,
    launcher="kubernetes",
)
