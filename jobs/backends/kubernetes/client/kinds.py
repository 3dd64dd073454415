"""The job kinds a run can be on the cluster (`job.api`): where each lives in the API, and the
things that differ between them, as questions the rest asks a kind instead of comparing its
name (how to suspend one, which container is the trainer's, whether its pods are a JobSet's,
whether it runs on a ClusterTrainingRuntime, how long a run id its pod names allow, where its
images are). Pure data; jobs/backends/kubernetes/client/state.py reads the objects. A new kind is
one JobKind in `KINDS` (and its renderer in jobs/backends/kubernetes/job_kinds.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs.naming import OPERATOR_PODS, POD_SUFFIX, PodNames


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
    the JobSet counts restarts), not pods the operator names by node rank. Such a job's state is
    Trainer's conditions and its jobs' status, it has no completionTime, its nodes are
    `spec.trainer.numNodes`, its image is `spec.trainer.image`, and trainstack deletes it once
    finished (its JobSet has no TTL); the others' are the training operator's conditions, their
    replica specs (`replica_specs`) and `runPolicy.ttlSecondsAfterFinished`."""
    on_runtime: bool = False
    """It names a ClusterTrainingRuntime (`job.runtime`), which the preflight checks."""
    replica_specs: str | None = None
    """Where an operator-run kind's replica specs live under `spec` (its nodes, its containers)."""
    rank_replicas: tuple[str, ...] = ()
    """An operator-run kind's replica types its node ranks are numbered across, in order (rank 0
    is the first one's pod 0); its pods are `<job>-<type, lowercase>-<index>`."""
    pod_names: PodNames = field(default=OPERATOR_PODS)
    """How its pods are named after the job: the longest run id it allows (jobs.naming)."""
    operator_calls: tuple[str, int] | None = None
    """(namespace, port): its operator calls the job's pods there (the run's NetworkPolicy
    lets that namespace in on that port alone); None: the operator never calls them."""
    status_reader: str = ""
    """Which controller's status says how the job is doing (client/state.py reads each, by
    `reader`): "operator" (the training operator's conditions), "trainer" (Trainer's conditions
    and its JobSet's jobs), "kuberay" (KubeRay's jobDeploymentStatus and the Ray job's status).
    Empty: "trainer" for a kind on a JobSet, else "operator"."""
    kept_when_finished: bool | None = None
    """Nothing deletes the job object once it has ended (no TTL of its own): trainstack does,
    client.state.TRAINJOB_TTL_S after it finished or was cancelled. None: a kind on a JobSet
    is (its JobSet has no TTL), an operator's is not (runPolicy.ttlSecondsAfterFinished)."""
    submitter_container: str | None = None
    """Its run's log is one pod's: its submitter Job's (a RayJob's `ray job submit`, which
    follows the driver's log, and Ray sends every worker's output to the driver), this
    container; the run has that one log (rank 0), whatever its node count."""
    followed: bool = True
    """The kubernetes backend submits and follows it, so the cluster side looks runs up under
    it; False: rendered (and run here) only, never looked up on a cluster, whose RBAC (the
    Training API's Role) need not name it."""
    install_hint: str = ""
    """What a missing CRD's message tells (empty: install `operator`, or choose another
    `job.api`)."""

    @property
    def reader(self) -> str:
        return self.status_reader or ("trainer" if self.runs_on_jobset else "operator")

    @property
    def kept(self) -> bool:
        if self.kept_when_finished is None:
            return self.runs_on_jobset
        return self.kept_when_finished

    @property
    def log_container(self) -> str:
        """The container `trainstack logs` reads."""
        return self.submitter_container or self.container

    @property
    def log_ranks(self) -> bool:
        """Whether its node ranks each have a log (else one: the submitter's)."""
        return self.submitter_container is None

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

    def pod_templates(self, job: dict) -> list[dict]:
        """The pod templates of a job object of this kind, as the objects in it (edits land in
        the job): one per replica spec; none for a kind on a JobSet (its pods are templated by
        the runtime, not the job)."""
        specs = (job.get("spec") or {}).get(self.replica_specs or "") or {}
        return [
            replica["template"]
            for replica in specs.values()
            if isinstance((replica or {}).get("template"), dict)
        ]

    def replica_counts(self, job: dict) -> dict[str, int]:
        """An operator-run job's replica type -> its pod count (empty on a JobSet)."""
        specs = (job.get("spec") or {}).get(self.replica_specs or "") or {}
        return {rtype: int((replica or {}).get("replicas", 0)) for rtype, replica in specs.items()}

    def gone_pod(self, job_name: str, rank: int) -> str:
        """An operator-run kind's pod of node rank `rank` once its job object is gone (its
        replica counts unknown): pod 0 of the first of `rank_replicas` (a PyTorchJob's one
        Master), then the last's (its Workers)."""
        first, last = self.rank_replicas[0].lower(), self.rank_replicas[-1].lower()
        return f"{job_name}-{first}-0" if rank == 0 else f"{job_name}-{last}-{rank - 1}"

    def image_holders(self, job: dict) -> list[dict]:
        """The parts of a job object of this kind that carry an `image` (its containers)."""
        if self.runs_on_jobset:
            return [(job.get("spec") or {})["trainer"]]
        holders = []
        for template in self.pod_templates(job):
            pod_spec = template["spec"]
            holders += pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
        return holders

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
    replica_specs="pytorchReplicaSpecs",
    rank_replicas=("Master", "Worker"),
    install_hint="install the Kubeflow training operator (the infra stack does) before "
    "submitting PyTorchJobs",
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
    on_runtime=True,
    # kubernetes-sigs/jobset v0.12.0, pkg/webhooks/jobset_webhook.go: its JobSet (same name)
    # names the pods `<jobset>-node-0-<index>-<5 random chars>` (one replicated job `node`,
    # jobs.backends.kubernetes.trainjob.NODE, of one Job), and JobSet's webhook refuses one whose
    # longest pod name would pass 63.
    pod_names=PodNames("-node-0-", POD_SUFFIX, what="a TrainJob", who="JobSet's pod names"),
)


KUBERAY_NAMESPACE = "kuberay-system"
"""The KubeRay operator's namespace (its chart's, as the stack is to install it)."""


@dataclass(frozen=True)
class RayJobKind(JobKind):
    """A KubeRay RayJob: its pod templates are the Ray cluster's head group and worker groups
    (`spec.rayClusterSpec`), not a map of replica specs."""

    def pod_templates(self, job: dict) -> list[dict]:
        cluster = (job.get("spec") or {}).get("rayClusterSpec") or {}
        groups = [cluster.get("headGroupSpec") or {}, *(cluster.get("workerGroupSpecs") or [])]
        return [g["template"] for g in groups if isinstance(g.get("template"), dict)]

    def replica_counts(self, job: dict) -> dict[str, int]:
        """The head (one pod) and each worker group's replicas: the Ray cluster's pods."""
        cluster = (job.get("spec") or {}).get("rayClusterSpec") or {}
        counts = {"head": 1} if cluster.get("headGroupSpec") else {}
        for group in cluster.get("workerGroupSpecs") or []:
            counts[str(group.get("groupName"))] = int(group.get("replicas") or 0)
        return counts


RAYJOB = RayJobKind(
    "rayjob",
    "RayJob",
    "ray.io",
    "v1",
    "rayjobs",
    "ray",
    "the KubeRay operator (the infra stack installs it)",
    suspend_path=("suspend",),
    runs_on_jobset=False,
    replica_specs="rayClusterSpec",
    rank_replicas=("head", "workers"),
    # ray-project/kuberay ray-operator/v1.6.2, ray-operator/controllers/ray/utils/constant.go
    # and validation.go (ValidateRayJobMetadata): a RayJob's name is a DNS-1035 label of at most
    # MaxRayJobNameLength = 47 characters (its RayCluster adds `-<5 random>`, its pods more).
    pod_names=PodNames("-abcde-head-", index_digits=4, what="a RayJob", who="KubeRay's names"),
    # KubeRay asks the head's dashboard (Ray's Jobs API, port 8265) for the job's state.
    operator_calls=(KUBERAY_NAMESPACE, 8265),
    status_reader="kuberay",
    # shutdownAfterJobFinishes deletes the Ray cluster, not the RayJob (ray-project/kuberay
    # ray-operator/v1.6.2, controllers/ray/rayjob_controller.go handleShutdownAfterJobFinishes).
    kept_when_finished=True,
    # utils.SubmitterContainerName (ray-operator/controllers/ray/utils/constant.go), the name
    # trainstack's submitterPodTemplate keeps (jobs/backends/kubernetes/rayjob.py).
    submitter_container="ray-job-submitter",
    install_hint="install the KubeRay operator (the infra stack does) before submitting RayJobs",
)
KINDS = {kind.api: kind for kind in (TRAINJOB, PYTORCHJOB, RAYJOB)}
BY_KIND = {kind.kind: kind for kind in KINDS.values()}

JOBSET_GROUP, JOBSET_VERSION, JOBSETS = "jobset.x-k8s.io", "v1alpha2", "jobsets"
RUNTIME_PLURAL = "clustertrainingruntimes"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""A TrainJob's JobSet has the TrainJob's name; its pods carry it in this label."""
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""The node rank of a TrainJob's pod (Trainer sets PET_NODE_RANK from it)."""
BATCH_JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""The Job controller's label on a Job's pods: a RayJob's submitter Job has its name."""


def kind_of(job: dict) -> JobKind:
    """The JobKind of a job object (as the API returns it)."""
    return BY_KIND.get(job.get("kind", ""), PYTORCHJOB)
