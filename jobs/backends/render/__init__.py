"""The render backend's home: its traits (here: light, read without importing the rest) and
the backend (`backend`), which writes kubectl-applyable YAML instead of submitting."""

from jobs.backends.traits import BackendTraits

TRAITS = BackendTraits(
    name="render",
    describe="write kubectl-applyable YAML to <backend.output_root>/<run_id>/manifests.yaml",
    pods=True,
    writes_output_root=True,
    submits=False,
)
