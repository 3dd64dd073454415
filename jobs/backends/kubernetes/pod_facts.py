"""The names of trainstack's runtimes, read by both the job renderers and the runtime renderer
that `pulumi up` runs (a pod's share of its instance and its platform env are instance facts:
catalog.pods; Kueue's label keys: catalog.kubernetes). Light on purpose: it imports nothing, so
infra's path to the runtime renderer (jobs/backends/kubernetes/runtimes.py) loads no launch
pipeline and no trainer module.
"""

from __future__ import annotations

RUNTIME_PREFIX = "trainstack-"
CPU_RUNTIME = f"{RUNTIME_PREFIX}cpu"
RUNTIME_LABELS = {
    "app.kubernetes.io/part-of": "trainstack",
    "trainer.kubeflow.org/framework": "torch",
}
"""The labels every trainstack runtime carries (the client's preflight tells a trainstack runtime
from another by them)."""


def gpu_runtime_name(node_group: str) -> str:
    """The ClusterTrainingRuntime `pulumi up` installs for GPU node group `node_group`."""
    return f"{RUNTIME_PREFIX}{node_group}"


def default_group_name(instance_type: str) -> str:
    """The node group name a job assumes without a stack: the instance type, DNS-safe."""
    return instance_type.replace(".", "-")
