"""Job spec -> a Kubeflow Trainer v2 `TrainJob` (trainer.kubeflow.org/v1alpha1), the sibling of
jobs/backends/kubernetes/manifests.py's PyTorchJob.
 Runtimes are the platform's, jobs are the user's: what every job on a node group repeats (node
selector and tolerations, EFA interfaces and huge pages, /dev/shm, the restricted security context,
NCCL/EFA environment, the failure policy) lives in the ClusterTrainingRuntime that `pulumi up`
installs (jobs/backends/kubernetes/runtimes.py); the TrainJob names it (`runtimeRef`) and carries
only the job's own parts: image, command, env, nodes, processes and resources per node, labels, and
through one `runtimePatches` entry what the trainer API has no field for (the config ConfigMap's
volume and mount, the runner's scratch and the FSx claim, `compute.capacity`'s node selector, the
service account, the grace period, the pods' labels — the run-id label the run's NetworkPolicy
selects them by).

A queued TrainJob (job.queue) carries only what the pinned Kueue's vendored Trainer types hold:
Kueue updates the whole job with them on admission and preemption, dropping any other field
(kubernetes-sigs/kueue v0.19.2, pkg/controller/jobs/trainjob/trainjob_controller.go; its
go.mod pins Trainer v2.2.1, whose `PodSpecPatch` has no `terminationGracePeriodSeconds`).
So a queued job leaves the grace period to its runtime
(jobs.backends.kubernetes.runtimes.RUNTIME_GRACE_S);
tests/k8s/test_k8s_kueue_trainer_fields.py checks every rendered field against those types.

Pure, like the PyTorchJob: the same spec and cluster side always give the same dict.
"""

from __future__ import annotations

from catalog.kubernetes import QUEUE_LABEL
from jobs.backends.kubernetes.client.kinds import TRAINJOB
from jobs.backends.kubernetes.kubernetes_job import KubernetesJob
from jobs.backends.kubernetes.manifests import (
    CONFIG_MOUNT,
    capacity_selector,
    config_volume,
    container_env,
    job_volumes,
    pod_metadata,
)
from jobs.backends.kubernetes.pod_parts import container_resources
from jobs.backends.kubernetes.runtimes import API_VERSION, NODE, RUNTIME_KIND
from jobs.spec import JobSpec

INSTANCE_TYPE_ANNOTATION = "trainstack.io/instance-type"
"""Where a TrainJob's nodes run (its runtime's node selector), for cost and the API's views."""
PATCH_MANAGER = "trainstack.io/launcher"
"""Who owns trainstack's `runtimePatches` entry (a domain-prefixed path, as the webhook wants)."""


def job_patch(spec: JobSpec, kube: KubernetesJob) -> dict:
    """The `runtimePatches` entry: what the pods need from this job that `spec.trainer` can't
    say. Env is not here: the webhook refuses env patches on the `node` container."""
    volumes, mounts = job_volumes(spec, kube)
    queued = QUEUE_LABEL in spec.labels  # Kueue drops the grace period: the runtime's applies
    grace = None if queued else spec.termination_grace_period_seconds
    pod = {
        "containers": [{"name": NODE, "volumeMounts": [dict(CONFIG_MOUNT), *mounts]}],
        "nodeSelector": capacity_selector(kube) or None,
        "serviceAccountName": kube.service_account,
        "terminationGracePeriodSeconds": grace,
        "volumes": [config_volume(spec.name), *volumes],
    }
    job_template = {"spec": {"template": {"metadata": pod_metadata(spec), "spec": pod}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": NODE, "template": job_template}]}}
        },
    }


def train_job(spec: JobSpec, kube: KubernetesJob) -> dict:
    trainer = {
        "command": list(spec.command),
        "env": container_env(spec, leave_out=kube.platform_env),
        "image": spec.image,
        "numNodes": spec.nodes,
        "numProcPerNode": spec.nproc_per_node,
        "resourcesPerNode": container_resources(spec.resources) if spec.resources else None,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": TRAINJOB.kind,
        "metadata": {
            "annotations": dict(spec.annotations)
            | ({INSTANCE_TYPE_ANNOTATION: spec.instance_type} if spec.instance_type else {}),
            "labels": dict(spec.labels),
            "name": spec.name,
            "namespace": kube.namespace,
        },
        "spec": {
            "activeDeadlineSeconds": kube.run_policy.active_deadline_seconds,
            "runtimePatches": [job_patch(spec, kube)],
            "runtimeRef": {"apiGroup": TRAINJOB.group, "kind": RUNTIME_KIND, "name": kube.runtime},
            # Created suspended for Kueue (job.queue): only Kueue un-suspends it, on admission.
            "suspend": True if kube.run_policy.suspend else None,
            "trainer": trainer,
        },
    }
