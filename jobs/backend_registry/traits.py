"""What a backend is, as the rest of the launcher asks it (SkyPilot's clouds declare what they
can do; the optimizer asks instead of comparing names). Each backend's package declares its
`TRAITS` here-typed, in its light `__init__`, with its options (the `backend` section: a
`BackendOptions` subclass registered with Hydra's ConfigStore, so a key of another backend fails
at compose time); `jobs.backend_registry.traits_of(name)` reads them without importing the
backend itself. Nothing in the pipeline compares backend names or imports a backend's home: what
it needs of one (its checks, a job's cluster side) the traits name as `module:attribute` hooks,
imported when asked (jobs.backend_registry.hook; pyproject's jobs floors keep the homes above
it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

SCHEMA_PREFIX = "trainstack_backend_"
"""ConfigStore name of a backend's options (`conf/backend/<name>.yaml` starts from them)."""


@dataclass
class BackendOptions:
    """The `backend` section: the group's option (`backend=<name>`) picks the subclass, whose
    fields are the only keys that backend reads. The keys here are every backend's: the
    launcher reads them whatever the backend (the sweep's directory, `--wait`, `--force`), and
    lines written for one backend (`data prepare ... backend.poll_interval_s=`) run on another."""

    name: str = MISSING
    """The backend (the group's option sets it)."""
    output_root: str = "runs"
    """Local directory a sweep's summary goes under (`<output_root>/sweeps/<sweep_id>/`), and
    backend=render's manifests (`<output_root>/<run_id>/`)."""
    wait: bool = False
    """Follow the job until it ends and exit with its result (`--wait`); a run here is always
    followed."""
    poll_interval_s: float = 5.0
    """Seconds between status polls while following a cluster job (a launch's or `data
    prepare`'s, which takes it whatever its backend)."""
    others_runs: bool = False
    """Resubmit or cancel a run whose owner label (`trainstack.io/owner`) names another user
    (`--force`; `cancel` consults every backend). Off, the CLI refuses (exit 2); kubectl RBAC is
    the real guard. Only runs on a cluster carry an owner."""

    @classmethod
    def fields(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def keys(cls) -> list[str]:
        return sorted(cls.fields())

    @classmethod
    def unknown_key(cls) -> str:
        """The problem of a key this backend does not read (jobs.errors.one_line asks it)."""
        return f"is not a key of backend={cls.name}; allowed: {', '.join(cls.keys())}"

    @classmethod
    def check(cls, cfg: Any) -> None:
        """The backend's own checks on its options (JobConfigError); none by default."""


@dataclass(frozen=True)
class ClusterSide:
    """Where a backend whose jobs run in pods keeps their cluster side, each entry
    `module:attribute` (as packaging's entry points name an object), imported only when the
    pipeline asks it (jobs.backend_registry.hook): the pipeline never imports a backend's home."""

    kinds: str
    """The job kinds by `job.api` (their `pod_names` bound the run ids: jobs.naming)."""
    job: str
    """`cfg -> job`: the job's cluster side (namespace, job kind, replicas, runtime...)."""
    manifests: str
    """`(spec, job, schemas) -> list[dict]`: its manifests, checked (`schemas`: against the
    Kubernetes schemas too); raises the backend's `refusal`."""
    schemas_installed: str
    """`() -> bool`: the Kubernetes schemas can be checked here."""
    refusal: str
    """The error class the manifest checks raise (a ValueError: one line, bad input)."""


@dataclass(frozen=True)
class BackendTraits:
    name: str
    """`backend.name`."""
    describe: str
    """One line: where a job goes (`trainstack launch --help` lists it)."""
    options: type[BackendOptions]
    """Its `backend` section (`backend.<key>`): a BackendOptions subclass whose `name` default
    is `name`."""
    pods: bool
    """The job runs in the cluster's pods, from manifests rendered here: every input must be
    reachable from a pod (s3://, the image, the stack's FSx), the cluster's checks apply, and
    the manifests are rendered and checked at materialize time."""
    schema_checks_required: bool = False
    """The manifests are always checked against the Kubernetes schemas (the backend needs the
    jobs extra anyway); False: checked where the schemas are installed, said otherwise."""
    on_cluster: bool = False
    """Its runs live on the cluster: consulted only when one is configured, and shared with
    other users (whose runs `trainstack runs` leaves out unless asked)."""
    submits: bool = True
    """Scheduling starts the run somewhere; False: the job is only written out (render), so
    there is nothing to follow or resume."""
    launcher: str = "trainstack"
    """The Hydra launcher family that runs a multirun's points: `trainstack` (validate every
    point, then run them here) or `kubernetes` (submit every point)."""
    job_checks: tuple[str, ...] = ()
    """`module:function` checks of the `job` section (cfg -> None, JobConfigError), run where
    jobs.validate checks the job's API (after compute and FSx)."""
    cluster_checks: tuple[str, ...] = ()
    """`module:function` checks of what the job may ask of the cluster (Secrets, priority,
    names), run after the image's."""
    cluster: ClusterSide | None = None
    """The cluster side of its jobs (set where `pods`)."""
