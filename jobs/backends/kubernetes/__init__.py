"""The kubernetes backend's home: its traits and options (here: light, read without importing
the rest), the backend (`backend`), the job kinds it submits (`job_kinds`: `manifests` for the
PyTorchJob and the pod pieces both kinds share, `trainjob`), the renderers (`runtimes`,
`network_policy`, `data_prepare`), the schema checks (`manifest_checks`) and the cluster client
(`client`, which never imports a backend). Choosing another backend, or rendering runtimes in
`pulumi up`, loads none of the rest."""

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
