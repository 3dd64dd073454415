"""A job kind is one entry in the kinds table (jobs.backends.kubernetes.client.kinds): what the
client, the checks and the names ask of a job are questions to its kind, so a third kind
registered here is read, suspended, counted, pinned and named without another edit."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from infra.settings.stack import TRAINING_OPERATORS
from jobs.backends.base import NoLogs
from jobs.backends.kubernetes import backend
from jobs.backends.kubernetes.checks import check_job_api
from jobs.backends.kubernetes.client import state
from jobs.backends.kubernetes.client.ecr import pin_images
from jobs.backends.kubernetes.client.kinds import BY_KIND, KINDS, RAYJOB, JobKind, kind_of
from jobs.backends.kubernetes.manifest_checks import ManifestError, _checked_name
from jobs.backends.kubernetes.manifests import CREATED_AT
from jobs.backends.kubernetes.run_status import instance_type_of
from jobs.backends.kubernetes.submitting import ClusterSettings, stamped
from jobs.errors import JobConfigError
from jobs.naming import POD_SUFFIX, PodNames

TFJOB = JobKind(
    "tfjob",
    "TFJob",
    "kubeflow.org",
    "v1",
    "tfjobs",
    "tensorflow",
    "the Kubeflow training operator v1",
    suspend_path=("runPolicy", "suspend"),
    runs_on_jobset=False,
    replica_specs="tfReplicaSpecs",
    rank_replicas=("Chief", "Worker"),
)
"""An operator-run kind: the operator's conditions, its replica specs."""
MPI_TRAINJOB = JobKind(
    "mpitrainjob",
    "MPITrainJob",
    "example.org",
    "v1",
    "mpitrainjobs",
    "node",
    "an example Trainer",
    suspend_path=("suspend",),
    runs_on_jobset=True,
    on_runtime=True,
    pod_names=PodNames("-launcher-0-", POD_SUFFIX, what="an MPITrainJob", who="its pod names"),
)
"""A JobSet-run kind whose pods are named otherwise."""


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    for kind in (TFJOB, MPI_TRAINJOB):
        monkeypatch.setitem(KINDS, kind.api, kind)
        monkeypatch.setitem(BY_KIND, kind.kind, kind)


def replica(count: int, image: str) -> dict:
    return {
        "replicas": count,
        "template": {"spec": {"containers": [{"name": "tensorflow", "image": image}]}},
    }


def tfjob(conditions: list[str], suspend: bool = False) -> dict:
    return {
        "kind": "TFJob",
        "metadata": {"name": "tf1", "uid": "u1"},
        "spec": {
            "tfReplicaSpecs": {"Chief": replica(1, "a:v1"), "Worker": replica(3, "b:v1")},
            "runPolicy": {"suspend": suspend},
        },
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def mpi_job(nodes: int, conditions: list[str], active: int = 0) -> dict:
    return {
        "kind": "MPITrainJob",
        "metadata": {"name": "m1", "uid": "u2"},
        "spec": {"trainer": {"numNodes": nodes, "image": "c:v1"}},
        "status": {
            "conditions": [
                {"type": c, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                for c in conditions
            ],
            "jobsStatus": [{"active": active}],
        },
    }


def test_an_operator_run_third_kind_is_read_suspended_counted_and_pinned():
    assert kind_of(tfjob([])) is TFJOB
    assert state.nodes(tfjob([])) == 4
    assert state.job_state(tfjob(["Created", "Running"])) == "Running"
    assert state.job_state(tfjob(["Succeeded"])) == "Succeeded"
    assert state.job_state(tfjob([], suspend=True)) == "Suspended"
    assert TFJOB.suspend_patch() == {"spec": {"runPolicy": {"suspend": True}}}
    [pinned] = pin_images([tfjob([])], resolve=lambda image: f"{image}@pinned")
    images = [
        c["image"]
        for r in pinned["spec"]["tfReplicaSpecs"].values()
        for c in r["template"]["spec"]["containers"]
    ]
    assert images == ["a:v1@pinned", "b:v1@pinned"]


def test_a_jobset_run_third_kind_is_read_by_its_jobs_and_named_by_its_pods():
    assert state.nodes(mpi_job(3, [])) == 3
    assert state.job_state(mpi_job(3, [], active=3)) == "Running"
    ending = mpi_job(3, [])  # its pods succeeded; Trainer has not set Complete yet
    ending["status"]["jobsStatus"] = [{"active": 0, "succeeded": 1, "failed": 0}]
    assert state.job_state(ending) == "Running"  # not back to Created
    assert state.job_state(mpi_job(3, ["Complete"])) == "Succeeded"
    assert state.finished_at(mpi_job(3, ["Complete"])) == "2026-01-01T00:00:00Z"
    [pinned] = pin_images([mpi_job(3, [])], resolve=lambda image: f"{image}@pinned")
    assert pinned["spec"]["trainer"]["image"] == "c:v1@pinned"
    # 63 - len("-launcher-0-") - len("2") - len("-abcde")
    fits = mpi_job(3, [])
    fits["metadata"]["name"] = "a" * 44
    assert _checked_name(fits, "MPITrainJob") == f"MPITrainJob {'a' * 44}"
    fits["metadata"]["name"] = "a" * 45
    with pytest.raises(ManifestError, match=r"at most 44 characters \(for an MPITrainJob of 3"):
        _checked_name(fits, "MPITrainJob")


def test_a_third_kinds_pod_templates_are_stamped_read_and_ranked():
    job = tfjob([])
    templates = [r["template"] for r in job["spec"]["tfReplicaSpecs"].values()]
    assert TFJOB.pod_templates(job) == templates
    assert all(a is b for a, b in zip(TFJOB.pod_templates(job), templates, strict=True))
    assert MPI_TRAINJOB.pod_templates(mpi_job(3, [])) == []
    # the submission stamp reaches its pods (issue 33's start count per submission)
    [job] = stamped([job], datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert job["metadata"]["annotations"][CREATED_AT] == "2026-01-02T03:04:05Z"
    assert [t["metadata"]["annotations"][CREATED_AT] for t in templates] == [
        "2026-01-02T03:04:05Z"
    ] * 2
    # the API's instance type (its cost) is read from its pod templates' node selector
    assert instance_type_of(job) is None
    templates[1]["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert instance_type_of(job) == "p5.48xlarge"
    # ranks are numbered across its rank_replicas: the Chief, then the Workers
    assert [state.pod_for_rank(job, r) for r in range(4)] == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    ]
    with pytest.raises(ValueError, match=r"--rank 4 is out of range: the job has ranks 0\.\.3"):
        state.pod_for_rank(job, 4)


def test_job_api_allows_exactly_the_registered_kinds():
    def cfg(api: str) -> SimpleNamespace:
        return SimpleNamespace(
            job=SimpleNamespace(api=api, runtime=None), backend=SimpleNamespace(name="local")
        )

    for api in KINDS:  # the three built in and the two registered here
        if api == RAYJOB.api:
            continue  # its checks read the runner's config too (tests/jobs/test_rayjob.py)
        check_job_api(cfg(api))
    with pytest.raises(JobConfigError) as err:
        check_job_api(cfg("mxjob"))
    assert str(err.value).endswith(f"'mxjob' is not allowed; allowed: {', '.join(KINDS)}")
    assert {"tfjob", "mpitrainjob", "trainjob", "pytorchjob", "rayjob"} == set(KINDS)


def test_a_third_kinds_archived_log_is_read_from_its_own_pod_names(monkeypatch):
    read = []

    def archived_log(region, group, pod, container):
        read.append((pod, container))

    monkeypatch.setattr(backend, "archived_log", archived_log)
    settings = ClusterSettings(None, None, "training", log_group="logs")
    reader = backend.KubernetesBackend(settings)
    for rank in (0, 2):
        with pytest.raises(NoLogs):
            reader.archived_logs("tf1", rank, TFJOB)
    assert read == [("tf1-chief-0", "tensorflow"), ("tf1-worker-1", "tensorflow")]


def test_the_cluster_side_looks_up_every_kind_the_configured_one_first():
    """A run is found under whichever kind it is (the Training API's Role names each kind's
    resource: the real RBAC refused every request through the API while a looked-up kind was
    missing from it, tests/e2e/test_e2e_serve.py); a stack's training operator is a
    TrainJob's or a PyTorchJob's, never KubeRay (which the stack installs beside it)."""
    for api in KINDS:
        looked_up = ClusterSettings(None, None, "training", job_api=api).kinds
        assert looked_up[0].api == api
        assert [kind.api for kind in looked_up] == [api, *(a for a in KINDS if a != api)]
    assert "rayjob" not in TRAINING_OPERATORS
