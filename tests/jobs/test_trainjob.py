"""TrainJobs and trainstack's ClusterTrainingRuntimes: valid against Kubeflow Trainer v2.3.0's
CRDs (strictly), catalog-driven, and together the same pod a PyTorchJob gets."""

from __future__ import annotations

import copy
import re

import pytest

from catalog import INSTANCE_TYPES
from catalog.pods import HUGEPAGES_2MI, platform_env
from contract.run_dir import POD_NAME_ENV, SUBMISSION_ENV
from jobs.backends.kubernetes.manifest_checks import (
    ManifestError,
    check_manifests,
    trainjob_pod_template,
)
from jobs.backends.kubernetes.pod_parts import SCRATCH_DIR, SCRATCH_ENV
from jobs.backends.kubernetes.runtimes import (
    DEFAULT_MAX_RESTARTS,
    NODE_GROUP_LABEL,
    cluster_training_runtimes,
    gpu_runtime,
)
from jobs.runners.program import start_counter
from testing_support import crd_schema
from tests.jobs.conftest import CLUSTER, build, trainjob_pod

VERSION = "1.33"


def test_vendored_crds_are_the_recorded_upstream_files():
    source = (crd_schema.CRD_DIR / "SOURCE.md").read_text()
    recorded = dict(
        re.findall(r"\| (trainer\.kubeflow\.org_\w+\.yaml) \| ([0-9a-f]{64}) \|", source)
    )
    trainer = {f for f in crd_schema.CRD_FILES.values() if f.startswith("trainer.")}
    assert set(recorded) == trainer
    for name, digest in recorded.items():
        assert crd_schema.sha256(name) == digest, name
    assert "v2.3.0" in source


@pytest.fixture(scope="module")
def p5_job() -> list[dict]:
    return build(
        ["compute=p5.48xlarge", "compute.nodes=2", *CLUSTER, "job.queue=training"]
    ).manifests


@pytest.mark.parametrize(
    "edit, error",
    [
        (lambda s: s["trainer"].update(numNode=2), "'numNode' was unexpected"),
        (lambda s: s["runtimeRef"].pop("name"), "'name' is a required property"),
        (lambda s: s.update(suspend="yes"), "is not of type 'boolean'"),
        (lambda s: s.update(elasticPolicy={"minNodes": 1}), "'elasticPolicy' was unexpected"),
        (lambda s: s.update(podTemplateOverrides=[]), "'podTemplateOverrides' was unexpected"),
    ],
)
def test_the_strict_crd_check_refuses_what_the_server_would_drop_or_refuse(p5_job, edit, error):
    job = copy.deepcopy(p5_job[1])
    assert crd_schema.errors(job) == []
    edit(job["spec"])
    assert any(error in line for line in crd_schema.errors(job)), crd_schema.errors(job)


def test_a_trainjob_is_queued_suspended_and_names_its_runtime(p5_job):
    config_map, job, _policy = p5_job
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod_labels = patch["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in pod_labels)
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "trainstack-p5-48xlarge",
    }
    volume = trainjob_pod_template(job)["spec"]["volumes"][0]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]


@pytest.mark.parametrize(
    "overrides, runtime",
    [
        ([], "trainstack-p5-48xlarge"),
        (["cluster.node_groups=[{name: h100, instance_type: p5.48xlarge}]"], "trainstack-h100"),
        (
            [
                "cluster.node_groups=[{name: a, instance_type: g5.12xlarge},"
                "{name: b, instance_type: p5.48xlarge}]"
            ],
            "trainstack-b",
        ),
        (["job.runtime=trainstack-my-runtime"], "trainstack-my-runtime"),
    ],
)
def test_the_runtime_is_the_stacks_group_of_the_instance_type(overrides, runtime):
    job = build(["compute=p5.48xlarge", *CLUSTER, *overrides]).manifests[1]
    assert job["spec"]["runtimeRef"]["name"] == runtime


RUNNERS = {
    "trainstack": [],
    # Anyone's program with the runner's scratch, on spot nodes with the stack's FSx mounted.
    "command": [
        "runner=command",
        "runner.command=[python,-u,train.py]",
        "+runner.args.lr=0.001",
        "+runner.env.MY_FLAG=1",
        "compute.capacity=spot",
        "storage.fsx=true",
        "storage.fsx_claim=fsx-claim",
    ],
    "command-once": [
        "runner=command",
        "runner.command=[accelerate,launch,train.py]",
        "runner.torchrun=false",
        "compute.capacity=on-demand",
    ],
    "hf": ["runner=hf", "model.init_from=s3://trainstack-models/llama"],
}


# The built-in trainer on every instance type; each other runner on an EFA type with and one
# without GPUDirect RDMA.
@pytest.mark.parametrize(
    "name, runner",
    [(name, "trainstack") for name in sorted(INSTANCE_TYPES)]
    + [
        (name, r)
        for r in sorted(RUNNERS)
        if r != "trainstack"
        for name in ("p5.48xlarge", "g6e.48xlarge")
    ],
)
def test_trainjob_on_its_runtime_gets_the_pytorchjob_pod(name: str, runner: str):
    overrides = [*CLUSTER, f"compute={name}", "compute.nodes=2", *RUNNERS[runner]]
    job = build(overrides).manifests[1]
    v1 = build([*overrides, "job.api=pytorchjob"]).manifests[1]
    v1_pod = v1["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    instance = INSTANCE_TYPES[name]
    pod = trainjob_pod(job)
    (container,) = pod["containers"]
    (v1_container,) = v1_pod["containers"]
    v1_container = without_the_start_count(v1_container)

    def by_name(items):
        return {i["name"]: i for i in items}

    assert by_name(container["env"]) == by_name(v1_container["env"])
    assert container["resources"] == v1_container["resources"]
    assert container["command"] == v1_container["command"]
    assert container["image"] == v1_container["image"]
    assert container["securityContext"] == v1_container["securityContext"]
    assert by_name(container["volumeMounts"]) == by_name(v1_container["volumeMounts"])
    assert set(by_name(pod["volumes"])) == set(by_name(v1_pod["volumes"]))
    for key in ("securityContext", "tolerations", "serviceAccountName"):
        assert pod[key] == v1_pod[key], key
    assert pod["terminationGracePeriodSeconds"] == v1_pod["terminationGracePeriodSeconds"]
    assert pod["nodeSelector"].items() >= v1_pod["nodeSelector"].items()
    assert pod["automountServiceAccountToken"] is v1_pod["automountServiceAccountToken"] is False
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert job["spec"]["trainer"]["numProcPerNode"] == int(v1["spec"]["nprocPerNode"])
    # The platform's environment is the runtime's, not repeated by each job.
    assert not set(platform_env(instance)) & {e["name"] for e in job["spec"]["trainer"]["env"]}


def without_the_start_count(container: dict) -> dict:
    """A PyTorchJob container less what only its pods carry: the start-count step, and the pod
    name and submission it counts under (issue 33: the Training Operator bounds no recreation;
    a TrainJob's JobSet counts its own restarts)."""
    step = start_counter(0)
    command = container["command"]
    assert command[: len(step) - 2] == list(step[:-2]) and command[len(step) - 1] == "--"
    env = [e for e in container["env"] if e["name"] not in (POD_NAME_ENV, SUBMISSION_ENV)]
    assert len(env) == len(container["env"]) - 2
    return {**container, "command": command[len(step) :], "env": env}


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_runtimes_are_catalog_driven_and_valid(name: str):
    instance = INSTANCE_TYPES[name]
    runtime = gpu_runtime("group-a", instance)
    crd_schema.check(runtime)
    check_manifests([runtime], VERSION)  # pod template schema + the restricted standard
    assert runtime["metadata"]["name"] == "trainstack-group-a"
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    pod = rjob["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "node"
    requests = container["resources"]["requests"]
    assert requests == container["resources"]["limits"]
    assert requests["nvidia.com/gpu"] == str(instance.gpus)
    assert requests.get("vpc.amazonaws.com/efa") == (
        str(instance.efa_interfaces) if instance.has_efa else None
    )
    assert requests.get("hugepages-2Mi") == (HUGEPAGES_2MI if instance.has_efa else None)
    assert {e["name"]: e["value"] for e in container["env"]} == platform_env(instance) | SCRATCH_ENV
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "scratch", "mountPath": SCRATCH_DIR} in container["volumeMounts"]
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": name,
        NODE_GROUP_LABEL: "group-a",
    }
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_runtime_failure_policy_restarts_all_nodes_but_never_after_bad_input():
    runtime = gpu_runtime("p5", INSTANCE_TYPES["p5.48xlarge"])
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"]["maxRestarts"] == DEFAULT_MAX_RESTARTS
    (rule,) = jobset["failurePolicy"]["rules"]
    assert (rule["action"], rule["onJobFailureReasons"]) == ("FailJobSet", ["PodFailurePolicy"])
    job = jobset["replicatedJobs"][0]["template"]["spec"]
    (pod_rule,) = job["podFailurePolicy"]["rules"]
    codes = set(pod_rule["onExitCodes"]["values"])
    assert pod_rule["action"] == "FailJob" and {1, 2, 127} <= codes
    assert not codes & {0, 128, 129, 137, 143}  # preempted, peer lost, killed: restarted
    assert job["template"]["spec"]["restartPolicy"] == "Never"


def test_a_stack_gets_one_runtime_per_gpu_group_and_a_cpu_one():
    groups = [("p5", INSTANCE_TYPES["p5.48xlarge"]), ("g6e", INSTANCE_TYPES["g6e.48xlarge"])]
    runtimes = cluster_training_runtimes(groups, service_account="trainer")
    assert [r["metadata"]["name"] for r in runtimes] == [
        "trainstack-p5",
        "trainstack-g6e",
        # what a render without a stack names, on the instance type's first group
        "trainstack-p5-48xlarge",
        "trainstack-g6e-48xlarge",
        "trainstack-cpu",
    ]
    by_name = {r["metadata"]["name"]: r for r in runtimes}
    assert by_name["trainstack-p5-48xlarge"]["spec"] == by_name["trainstack-p5"]["spec"]
    for runtime in runtimes:
        crd_schema.check(runtime)
    check_manifests(runtimes, VERSION)
    cpu = runtimes[-1]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    cpu_pod = cpu["template"]["spec"]
    assert "tolerations" not in cpu_pod
    assert "nvidia.com/gpu" not in cpu_pod["containers"][0]["resources"]["limits"]


def _patched_pod(spec: dict) -> dict:
    patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda s: s["trainer"]["env"].append({"name": "PET_NNODES", "value": "3"}),
            "spec.trainer.env: reserved for torchrun: ['PET_NNODES']",
        ),
        (
            lambda s: _patched_pod(s)["containers"][0].update(env=[{"name": "A", "value": "1"}]),
            "no env patches on the 'node' container",
        ),
        (
            lambda s: s["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
                "replicatedJobs"
            ][0].update(name="launcher"),
            "replicated job 'launcher' is not in the runtime",
        ),
        (lambda s: s["runtimePatches"][0].update(manager="trainstack"), "domain-prefixed path"),
        (lambda s: s["runtimeRef"].update(name=""), "spec.runtimeRef.name"),
        (lambda s: s["trainer"].update(image=""), "spec.trainer.image"),
        (
            lambda s: s["trainer"]["resourcesPerNode"]["limits"].update(cpu=["1"]),
            "TrainJob golden-run pod template",
        ),
        (
            lambda s: _patched_pod(s).update(serviceAccountName=7),
            "serviceAccountName",
        ),
    ],
)
def test_trainjob_webhook_and_pod_schema_rules_refuse_before_submit(p5_job, edit, message):
    broken = copy.deepcopy(p5_job)
    edit(broken[1]["spec"])
    with pytest.raises(ManifestError, match=re.escape(message)):
        check_manifests(broken, VERSION)


def test_trainjob_manifests_pass_their_own_checks(p5_job):
    check_manifests(p5_job, VERSION)


def test_an_hf_model_on_a_trainjob_is_refused_in_one_line():
    from jobs.compose import compose
    from jobs.errors import JobConfigError
    from jobs.validate import validate_job
    from tests.jobs.conftest import GIT_SHA

    overrides = [*CLUSTER, "compute=p5.48xlarge", "model.init_from=hf://org/model"]
    with pytest.raises(JobConfigError) as raised:
        validate_job(compose(overrides), git_sha=GIT_SHA)
    message = str(raised.value)
    assert message.startswith("model.init_from: 'hf://org/model': ") and "\n" not in message
    assert "job.api=pytorchjob" in message  # whose pods get the model-initializer (tests/hf)
