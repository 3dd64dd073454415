"""The local backend's home: its traits and options (here: light, read without importing the
rest), the backend (`backend`) and the supervisor process it starts per run (`supervisor`,
`python -m jobs.backends.local.supervisor`)."""

from dataclasses import dataclass

from jobs.backends.traits import BackendOptions, BackendTraits


@dataclass
class LocalOptions(BackendOptions):
    """backend=local reads only the keys every backend has."""

    name: str = "local"


TRAITS = BackendTraits(
    name="local",
    describe="run here as local torchrun processes; the run dir is <storage.root>/<run_id>",
    options=LocalOptions,
    pods=False,
)
