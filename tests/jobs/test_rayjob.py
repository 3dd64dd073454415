"""job.api=rayjob: the RayJob (ray.io/v1) trainstack renders, strictly valid against KubeRay
v1.6.2's CRD (vendored from the pinned module), refused where Kueue's RayJob webhook or KubeRay
would refuse it, and leaving the GPUs to the workers (ray-project/ray#24455)."""

from __future__ import annotations

import copy

import pytest

from jobs.backends.kubernetes.client.kinds import KUBERAY_NAMESPACE, RAYJOB
from jobs.backends.kubernetes.manifest_checks import ManifestError, check_manifests
from jobs.backends.kubernetes.rayjob import HEAD_CONTAINER, WORKER_GROUP
from jobs.errors import JobConfigError
from testing_support import crd_schema
from testing_support.kuberay import kuberay_refusal
from tests.jobs.conftest import CLUSTER, build

VERL = ["experiment=verl_grpo_qwen2_5_0_5b", *CLUSTER, "storage.fsx_claim=fsx-claim"]
QUEUED = [*VERL, "job.queue=training"]
VERSION = "1.35"


@pytest.fixture(scope="module")
def verl() -> list[dict]:
    return build(QUEUED, run_id="verl-grpo").manifests


def _cluster(job: dict) -> dict:
    return job["spec"]["rayClusterSpec"]


def test_the_verl_experiment_is_one_rayjob_valid_against_kuberay_v1_6_2s_crd(verl):
    config_map, job, policy = verl
    assert (config_map["kind"], job["kind"], policy["kind"]) == (
        "ConfigMap",
        "RayJob",
        "NetworkPolicy",
    )
    assert job["apiVersion"] == "ray.io/v1"
    crd_schema.check(job)
    spec = job["spec"]
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["backoffLimit"] == 3  # the experiment's job.max_restarts
    assert spec["suspend"] is True  # queued: only Kueue un-suspends it
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert spec["entrypoint"].startswith(
        "python -m trainer.runner_exec --config /etc/trainstack/config.yaml -- "
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "
    )
    # VERL resolves its own run-id interpolation; trainstack's composition left it as text.
    assert (
        "'trainer.default_local_dir=/fsx/checkpoints/${oc.env:TRAINSTACK_RUN_ID}'"
        in (spec["entrypoint"])
    )
    workers = _cluster(job)["workerGroupSpecs"]
    assert [
        (g["groupName"], g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in workers
    ] == [(WORKER_GROUP, 4, 4, 4)]
    assert _cluster(job)["enableInTreeAutoscaling"] is False


def test_every_pod_has_the_runs_config_account_label_and_contract(verl):
    _, job, _policy = verl
    cluster = _cluster(job)
    templates = [cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]]
    for template in templates:
        pod = template["spec"]
        assert template["metadata"]["labels"]["trainstack.io/run-id"] == "verl-grpo"
        assert pod["serviceAccountName"] == "trainer"
        assert {v["name"] for v in pod["volumes"]} >= {"trainer-config", "fsx", "dshm"}
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["TRAINSTACK_RUN_ID"] == "verl-grpo"
        assert env["TRAINSTACK_CHECKPOINT_DIR"]
    # The submitter pod carries the label too: the run's policy lets it reach the dashboard.
    submitter = job["spec"]["submitterPodTemplate"]
    assert submitter["metadata"]["labels"]["trainstack.io/run-id"] == "verl-grpo"
    assert "command" not in submitter["spec"]["containers"][0]  # KubeRay's `ray job submit`


def test_spot_capacity_is_the_workers_the_head_and_submitter_stay_on_the_system_nodes():
    job = build([*VERL, "compute.capacity=spot"], run_id="verl-spot").manifests[1]
    cluster = _cluster(job)
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"]["eks.amazonaws.com/capacityType"] == "SPOT"
    assert "nodeSelector" not in cluster["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in job["spec"]["submitterPodTemplate"]["spec"]


def test_workers_take_the_nodes_gpus_efa_and_taint_the_head_is_a_cpu_pod(verl):
    cluster = _cluster(verl[1])
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    limits = worker["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and limits["vpc.amazonaws.com/efa"] == "32"
    assert worker["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert [t["key"] for t in worker["tolerations"]] == ["nvidia.com/gpu"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["name"] == HEAD_CONTAINER
    assert "nvidia.com/gpu" not in head["containers"][0]["resources"]["limits"]
    assert "tolerations" not in head  # never scheduled onto a (tainted) GPU node
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"


def test_the_driver_reserves_no_gpus_so_ray_leaves_cuda_visible_devices_alone(verl):
    """ray-project/ray#24455: Ray 1.12's job supervisor actor (0 GPUs) got
    CUDA_VISIBLE_DEVICES="" and the driver it started inherited it. The fix (#24546) sets
    RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES for the supervisor, but only when the job asks
    for no entrypoint resources: any entrypointNum* brings the bug back. The workers' GPUs are
    VERL's placement groups' to take."""
    spec = verl[1]["spec"]
    reserved = {k for k in spec if k.startswith("entrypoint") and k != "entrypoint"}
    assert reserved == set()
    env = spec["runtimeEnvYAML"]
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert "FI_PROVIDER: efa" in env and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in env


def test_the_network_policy_lets_kuberay_reach_only_the_dashboard(verl):
    ingress = verl[2]["spec"]["ingress"]
    assert ingress[0] == {
        "from": [{"podSelector": {"matchLabels": {"trainstack.io/run-id": "verl-grpo"}}}]
    }
    operator = ingress[1]
    namespace = operator["from"][0]["namespaceSelector"]["matchLabels"]
    assert namespace == {"kubernetes.io/metadata.name": KUBERAY_NAMESPACE}
    assert operator["ports"] == [{"port": 8265, "protocol": "TCP"}]


@pytest.mark.parametrize(
    "edit, refusal",
    [
        (lambda s: s.update(shutdownAfterJobFinishes=False), "spec.shutdownAfterJobFinishes"),
        (lambda s: s.update(clusterSelector={"ray.io/cluster": "c"}), "spec.clusterSelector"),
        (lambda s: s.pop("rayClusterSpec"), "spec.rayClusterSpec: required"),
        (
            lambda s: s["rayClusterSpec"].update(enableInTreeAutoscaling=True),
            "spec.rayClusterSpec.enableInTreeAutoscaling",
        ),
        (
            lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].update(groupName="head"),
            "workerGroupSpecs[0].groupName: 'head' is reserved",
        ),
        (
            lambda s: s["rayClusterSpec"].update(
                workerGroupSpecs=s["rayClusterSpec"]["workerGroupSpecs"] * 18
            ),
            "18 groups; at most 17",
        ),
        (
            lambda s: s["rayClusterSpec"].update(
                workerGroupSpecs=s["rayClusterSpec"]["workerGroupSpecs"] * 17
            ),
            "17 groups; at most 16 in K8sJobMode",
        ),
        (
            lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].update(maxReplicas=8),
            "a fixed gang",
        ),
    ],
)
def test_kueues_rayjob_webhook_rules_are_refused_before_anything_is_written(verl, edit, refusal):
    manifests = copy.deepcopy(verl)
    check_manifests(manifests, VERSION)  # the render itself passes
    edit(manifests[1]["spec"])
    with pytest.raises(ManifestError, match="RayJob verl-grpo") as refused:
        check_manifests(manifests, VERSION)
    assert refusal in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_rayjob_name_is_kuberays_47_characters_at_most():
    assert RAYJOB.pod_names.max_run_id_len() == 47
    manifests = build(VERL, run_id="r" * 47).manifests
    job = copy.deepcopy(manifests[1])
    job["metadata"]["name"] = "r" * 48
    with pytest.raises(ManifestError, match=r"metadata\.name"):
        check_manifests([job], VERSION)


def test_the_strict_crd_check_refuses_a_field_kuberay_would_drop(verl):
    job = copy.deepcopy(verl[1])
    job["spec"]["entrypointNumGPUs"] = 1  # misspelt: the server would prune it
    assert any("'entrypointNumGPUs' was unexpected" in e for e in crd_schema.errors(job))


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["job.api=rayjob", "compute=p5.48xlarge", *CLUSTER], "runner"),
        (
            [
                "job.api=rayjob",
                "compute=p5.48xlarge",
                "runner=hf",
                "model=hf",
                *CLUSTER,
                "model.init_from=s3://b/models/x",
            ],
            "runner",
        ),
        ([*VERL, "runner.torchrun=true"], "runner.torchrun"),
        ([*VERL, "runner.workdir=."], "runner.workdir"),
        ([*VERL, "job.elastic.min_nodes=2", "job.elastic.max_nodes=4"], "job.elastic"),
        ([*VERL, "job.runtime=trainstack-p5"], "job.runtime"),
    ],
)
def test_what_a_rayjob_cannot_run_is_refused_in_one_line(overrides, key):
    """(backend=kubernetes submits and follows a RayJob: not refused,
    test_the_kubernetes_backend_takes_a_rayjob.)"""
    with pytest.raises(JobConfigError) as refused:
        build(overrides)
    assert refused.value.key == key, str(refused.value)


def test_kuberay_v1_6_2s_own_validation_accepts_the_render_and_refuses_a_planted_break(
    verl, tmp_path
):
    """Compiled from the pinned module (testing_support/kuberay.py): the checks KubeRay's
    controller makes before it creates the Ray cluster, beyond what its CRD schema says."""
    assert kuberay_refusal(verl[1], tmp_path) is None
    spot = build([*VERL, "compute.capacity=spot"], run_id="verl-spot").manifests[1]
    assert kuberay_refusal(spot, tmp_path) is None
    broken = copy.deepcopy(verl[1])
    broken["spec"]["shutdownAfterJobFinishes"] = False  # suspended (queued) without it
    assert "shutdownAfterJobFinishes" in (kuberay_refusal(broken, tmp_path) or "")


def test_the_kubernetes_backend_takes_a_rayjob():
    """backend=kubernetes submits the same RayJob backend=render writes (it was refused while
    a RayJob's status and logs were not followed there)."""
    job = build([*VERL, "backend=kubernetes"])
    assert [m["kind"] for m in job.manifests].count("RayJob") == 1
