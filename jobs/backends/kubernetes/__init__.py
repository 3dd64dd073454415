"""The kubernetes backend's home: its traits and options (here: light, read without importing
the rest), the backend (`backend`), a job's cluster side (`kubernetes_job`: namespace, job
kind, replicas, run policy, runtime...), the job kinds it submits (`job_kinds`: `manifests` for
the PyTorchJob and the pod pieces both kinds share, `trainjob`), the renderers (`runtimes`,
`network_policy`, `data_prepare`, `eval_job`; `eval_schedule` submits a followed run's eval
Jobs) and the light modules under them (`pod_facts`: runtime
names; `pod_parts`: volumes, resources, security contexts; a pod's share of its instance and
its platform env are instance facts, catalog.pods), the schema checks (`manifest_checks`) and
the cluster client (`client`, which never imports a backend). The launch pipeline reaches them
only through the entries below (`JOB_CHECKS`, `CLUSTER_CHECKS`, `CLUSTER`: `module:attribute`,
imported when asked). Choosing another backend loads none of the rest; rendering runtimes in
`pulumi up` loads `runtimes`, `pod_facts`, `pod_parts`, `manifest_checks` and `client.kinds`
only."""

from dataclasses import dataclass

from jobs.backend_registry.traits import BackendOptions, BackendTraits, ClusterSide

_HOME = "jobs.backends.kubernetes"

JOB_CHECKS = (f"{_HOME}.checks:check_job_api",)
"""The `job` section's checks (every backend runs them: the section is every job's)."""
CLUSTER_CHECKS = (
    f"{_HOME}.checks:check_secrets_approved",
    f"{_HOME}.checks:check_priority_approved",
    f"{_HOME}.checks:check_cluster_names",
)
"""What a job may ask of the cluster (every backend runs them, as the `job` section's)."""
CLUSTER = ClusterSide(
    kinds=f"{_HOME}.client.kinds:KINDS",
    job=f"{_HOME}.kubernetes_job:kubernetes_job",
    manifests=f"{_HOME}.job_kinds:to_manifests",
    schemas_installed=f"{_HOME}.manifest_checks:schemas_installed",
    refusal=f"{_HOME}.manifest_checks:ManifestError",
)
"""A job's cluster side, here (render writes the same manifests)."""


@dataclass
class KubernetesOptions(BackendOptions):
    name: str = "kubernetes"
    preflight: bool = True
    """Check CRD, nodes and namespace before submitting (`--skip-preflight`)."""
    evals_scheduled: bool = False
    """Something on the cluster submits `eval.every_checkpoint`'s eval Jobs for every run
    that asks, followed or not: the Training API sets it (its scheduler,
    jobs/api/eval_scheduler.py). False: `launch --wait` must follow the run to submit them."""


TRAITS = BackendTraits(
    name="kubernetes",
    describe="submit to the cluster in cluster.* (kubeconfig/context from config or the stack)",
    options=KubernetesOptions,
    pods=True,
    schema_checks_required=True,
    on_cluster=True,
    launcher="kubernetes",
    job_checks=JOB_CHECKS,
    cluster_checks=CLUSTER_CHECKS,
    cluster=CLUSTER,
)
