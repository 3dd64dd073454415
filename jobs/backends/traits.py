"""What a backend is, as the rest of the launcher asks it (SkyPilot's clouds declare what they
can do; the optimizer asks instead of comparing names). Each backend's package declares its
`TRAITS` here-typed, in its light `__init__`; `jobs.backends.traits_of(name)` reads them without
importing the backend itself. Nothing in the pipeline compares backend names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendTraits:
    name: str
    """`backend.name`."""
    describe: str
    """One line: where a job goes (help, `trainstack runs`)."""
    pods: bool
    """The job runs in the cluster's pods, from manifests rendered here: every input must be
    reachable from a pod (s3://, the image, the stack's FSx), the cluster's checks apply, and
    the manifests are rendered and checked at materialize time."""
    schema_checks_required: bool = False
    """The manifests are always checked against the Kubernetes schemas (the backend needs the
    jobs extra anyway); False: checked where the schemas are installed, said otherwise."""
    writes_output_root: bool = False
    """Writes its runs under `backend.output_root` (checked to be a writable local directory)."""
    on_cluster: bool = False
    """Its runs live on the cluster: consulted only when one is configured, and shared with
    other users (whose runs `trainstack runs` leaves out unless asked)."""
    submits: bool = True
    """Scheduling starts the run somewhere; False: the job is only written out (render), so
    there is nothing to follow or resume."""
    launcher: str = "trainstack"
    """The Hydra launcher family that runs a multirun's points: `trainstack` (validate every
    point, then run them here) or `kubernetes` (submit every point)."""
