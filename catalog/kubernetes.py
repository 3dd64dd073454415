"""Kubernetes facts both sides read.

The Kubernetes minor version a new cluster runs: `infra` creates EKS clusters at it
(`trainstack:kubernetesVersion` default, infra/settings/versions.py) and `jobs` validates pod
templates against its schemas (`cluster.kubernetes_version` default, before a stack's outputs
set the cluster's real version in the stack file). One constant, so a job composed without a
stack is checked against the version its cluster will run.

In EKS standard support until 2027-03 (1.34's ends 2026-12); kubernetes-validate (constraints.txt)
must bundle its schemas.
"""

KUBERNETES_VERSION = "1.35"

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
"""The label keys Kueue reads on a job (its LocalQueue and WorkloadPriorityClass): a job's
spec sets them from job.queue and job.priority, the cluster client reads the first."""

SERVING_PRIORITY_CLASS = "trainstack-serving"
"""The PriorityClass (scheduling.k8s.io/v1) of served models' pods (`serve-model
backend=kubernetes`): infra/serving.py creates it above every training pod's priority (they
set none: 0), so the scheduler never evicts a serving pod for a training one."""
