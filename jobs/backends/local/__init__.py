"""The local backend's home: its traits and options (here: light, read without importing the
rest), the backend (`backend`) and the supervisor process it starts per run (`supervisor`,
`python -m jobs.backends.local.supervisor`)."""

from dataclasses import dataclass

from jobs.backend_registry.traits import BackendOptions, BackendTraits
from jobs.backends.kubernetes import CLUSTER_CHECKS, JOB_CHECKS


@dataclass
class LocalOptions(BackendOptions):
    """backend=local reads only the keys every backend has."""

    name: str = "local"


TRAITS = BackendTraits(
    name="local",
    describe="run here as local torchrun processes; the run dir is <storage.root>/<run_id>",
    options=LocalOptions,
    pods=False,
    # A local job's `job` and `cluster` sections are checked as a cluster's (as they always
    # were: the first error a user sees does not depend on the backend).
    job_checks=JOB_CHECKS,
    cluster_checks=CLUSTER_CHECKS,
)
