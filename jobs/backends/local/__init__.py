"""The local backend's home: its traits (here: light, read without importing the rest), the
backend (`backend`) and the supervisor process it starts per run (`supervisor`,
`python -m jobs.backends.local.supervisor`)."""

from jobs.backends.traits import BackendTraits

TRAITS = BackendTraits(
    name="local",
    describe="run here as local torchrun processes; the run dir is <storage.root>/<run_id>",
    pods=False,
)
