"""The job kinds a run can be on the cluster (`job.api`), and a run's objects put together.

Each kind is its API facts and its verbs' differences (`client.kinds.JobKind`: where it lives,
how it is suspended, which container is the trainer's, how its state is read, how its pods are
named) plus its renderer, here: the PyTorchJob (jobs/backends/kubernetes/manifests.py), the
TrainJob (jobs/backends/kubernetes/trainjob.py) and the RayJob (rayjob.py), and its operator's
admission rules (`manifest_checks.JOB_CHECKS`). A new kind is one JobKind in
`client.kinds.KINDS`, its renderer in `RENDERERS` and its checks in `JOB_CHECKS`; nothing else
compares kind names.
"""

from __future__ import annotations

from collections.abc import Callable

from jobs.backends.kubernetes.client.kinds import PYTORCHJOB, RAYJOB, TRAINJOB
from jobs.backends.kubernetes.kubernetes_job import KubernetesJob
from jobs.backends.kubernetes.manifest_checks import check_manifests
from jobs.backends.kubernetes.manifests import config_map, drop_none, pytorch_job
from jobs.backends.kubernetes.network_policy import job_network_policy
from jobs.backends.kubernetes.rayjob import ray_job
from jobs.backends.kubernetes.trainjob import train_job
from jobs.spec import JobSpec

RENDERERS: dict[str, Callable[[JobSpec, KubernetesJob], dict]] = {
    PYTORCHJOB.api: pytorch_job,
    TRAINJOB.api: train_job,
    RAYJOB.api: ray_job,
}
"""`job.api` -> the function rendering the job object of that kind."""


def to_manifests(spec: JobSpec, kube: KubernetesJob, schemas: bool = True) -> list[dict]:
    """[ConfigMap, TrainJob or PyTorchJob (`job.api`), NetworkPolicy] as plain dicts, validated
    (raises `ManifestError`; `schemas`: manifest_checks.check_manifests); the policy
    (jobs/backends/kubernetes/network_policy.py) lets only this run's pods in.
    The submitter creates it before the job; applied in file order it lands after the job,
    which the namespace's default deny keeps closed meanwhile."""
    job = RENDERERS[kube.api](spec, kube)
    policy = job_network_policy(spec, kube)
    manifests = [drop_none(config_map(spec, kube)), drop_none(job), policy]
    check_manifests(manifests, kube.kubernetes_version, schemas)
    return manifests
