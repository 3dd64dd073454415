"""The RayJob's driver sees the head's GPUs, checked with the real `ray` package (the `ray`
extra): ray-project/ray#24455 (Ray 1.12: `ray job submit` left the driver with no GPUs, the
seed's "0 GPUs", worked around there with `kubectl exec`) was the job supervisor actor getting
CUDA_VISIBLE_DEVICES="" for its 0 GPUs, inherited by the driver. Its fix (#24546) is still
Ray 2.60's `JobManager._get_supervisor_runtime_env`, and holds only while the job reserves no
entrypoint resources, which trainstack's RayJob never does."""

from __future__ import annotations

import yaml
from ray._private.accelerators.nvidia_gpu import NOSET_CUDA_VISIBLE_DEVICES_ENV_VAR
from ray.dashboard.modules.job.job_manager import JobManager

from tests.jobs.conftest import CLUSTER, build

ENTRYPOINT_RESOURCES = ("entrypointNumCpus", "entrypointNumGpus", "entrypointResources")
"""The RayJob fields KubeRay passes to `ray job submit` as --entrypoint-* (ray-project/kuberay
ray-operator/v1.6.2, controllers/ray/common/job.go BuildJobSubmitCommand)."""


def _supervisor_env(job: dict) -> dict:
    spec = job["spec"]
    user_env = yaml.safe_load(spec.get("runtimeEnvYAML") or "{}") or {}
    reserved = any(spec.get(key) for key in ENTRYPOINT_RESOURCES)
    # An unbound call: the method reads `self` only to stream runtime-env logs (off here).
    env = JobManager._get_supervisor_runtime_env(None, user_env, "sub-1", reserved)
    return env["env_vars"]


def test_rays_supervisor_leaves_the_drivers_gpus_visible_for_the_rendered_rayjob():
    job = build(
        ["experiment=verl_grpo_qwen2_5_0_5b", *CLUSTER, "storage.fsx_claim=fsx-claim"],
        run_id="verl-grpo",
    ).manifests[1]
    env = _supervisor_env(job)
    assert env[NOSET_CUDA_VISIBLE_DEVICES_ENV_VAR] == "1"
    assert env["FI_PROVIDER"] == "efa"  # the runtime env reaches it


def test_reserving_entrypoint_resources_would_bring_the_bug_back():
    """Why the renderer sets none (and test_rayjob.py checks it): with one, Ray skips the fix
    and the driver gets only the GPUs it reserved."""
    job = build(
        ["experiment=verl_grpo_qwen2_5_0_5b", *CLUSTER, "storage.fsx_claim=fsx-claim"],
        run_id="verl-grpo",
    ).manifests[1]
    job["spec"]["entrypointNumCpus"] = 1
    assert NOSET_CUDA_VISIBLE_DEVICES_ENV_VAR not in _supervisor_env(job)
