"""The two job kinds a run can be on the cluster (`job.api`): where each lives in the API, and the
few things that differ between them (how to suspend one, which container is the trainer's, how its
pods are labelled). Pure data; jobs/backends/kubernetes/client/state.py reads the objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobKind:
    api: str
    """The `job.api` value."""
    kind: str
    group: str
    version: str
    plural: str
    container: str
    """The trainer's container in each pod."""
    operator: str
    """What installs it, for messages."""
    suspend_path: tuple[str, ...]
    """Where `suspend` lives under the job's `spec`."""
    runs_on_jobset: bool
    """Its pods are a JobSet's (found by the JobSet's labels, the newest restart attempt first;
    the JobSet counts restarts), not pods the operator names by node rank."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    def suspend_patch(self) -> dict:
        """The merge patch that suspends a job of this kind (its pods are deleted)."""
        patch: Any = True
        for key in reversed(("spec", *self.suspend_path)):
            patch = {key: patch}
        return patch

    def is_suspended(self, job: dict) -> bool:
        """Whether the job object's spec asks for it to be suspended."""
        value: Any = job.get("spec") or {}
        for key in self.suspend_path:
            value = (value or {}).get(key)
        return bool(value)


PYTORCHJOB = JobKind(
    "pytorchjob",
    "PyTorchJob",
    "kubeflow.org",
    "v1",
    "pytorchjobs",
    "pytorch",
    "the Kubeflow training operator v1 (trainstack:trainingOperator: pytorchjob)",
    suspend_path=("runPolicy", "suspend"),
    runs_on_jobset=False,
)
TRAINJOB = JobKind(
    "trainjob",
    "TrainJob",
    "trainer.kubeflow.org",
    "v1alpha1",
    "trainjobs",
    "node",
    "Kubeflow Trainer v2 (the infra stack installs it)",
    suspend_path=("suspend",),
    runs_on_jobset=True,
)
KINDS = {kind.api: kind for kind in (TRAINJOB, PYTORCHJOB)}
BY_KIND = {kind.kind: kind for kind in KINDS.values()}

JOBSET_GROUP, JOBSET_VERSION, JOBSETS = "jobset.x-k8s.io", "v1alpha2", "jobsets"
RUNTIME_PLURAL = "clustertrainingruntimes"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""A TrainJob's JobSet has the TrainJob's name; its pods carry it in this label."""
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""The node rank of a TrainJob's pod (Trainer sets PET_NODE_RANK from it)."""


def kind_of(job: dict) -> JobKind:
    """The JobKind of a job object (as the API returns it)."""
    return BY_KIND.get(job.get("kind", ""), PYTORCHJOB)
