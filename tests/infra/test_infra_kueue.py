"""Kueue in the stack, under Pulumi's mocks: the pinned chart, a tainted ResourceFlavor per GPU
node group and the untainted `system` flavor last, a ClusterQueue whose nominal quota is the
groups' nodes at maxSize (from the catalog) and `trainstack:kueue.systemQuota` on `system`, a
LocalQueue in the training namespace, priority classes; bad settings fail in one line."""

from __future__ import annotations

import copy

import pytest
import yaml
from kubernetes.utils import parse_quantity

from catalog import INSTANCE_TYPES
from infra.cluster import SYSTEM_NODE_LABELS
from infra.gpu_nodes import GROUP_LABEL
from infra.kueue import (
    COVERED_RESOURCES,
    INTEGRATIONS,
    KUEUE_VERSION,
    canonical_binary,
    kueue_values,
    manager_config,
)
from infra.settings.stack import TRAINING_OPERATORS, ConfigError
from jobs.backends.kubernetes.client.kinds import KINDS
from tests.infra.pulumi_harness import RecordingMocks, run_program, stack_file_config

CUSTOM = "kubernetes:kueue.x-k8s.io/v1beta1:"
RELEASE = "kubernetes:helm.sh/v3:Release"


def kind(run, name: str) -> list:
    return run.of_type(f"{CUSTOM}{name}")


@pytest.mark.parametrize(
    ("value", "unit", "stored"),
    [(4096, "Gi", "4Ti"), (10240, "Mi", "10Gi"), (1152, "Gi", "1152Gi"), (0, "Mi", "0")],
)
def test_quantities_are_written_as_the_api_server_stores_them(value, unit, stored):
    """What kube-apiserver returns for `<value><unit>` (seen on the local cluster: written as
    4096Gi, the ClusterQueue came back 4Ti and every preview showed an update)."""
    assert canonical_binary(value, unit) == stored


@pytest.mark.parametrize("operator", TRAINING_OPERATORS)
def test_kueue_integrates_rayjobs_exactly_when_the_stack_installs_kuberay(operator):
    """Kueue v0.19.2's framework name (pkg/controller/jobs/rayjob/rayjob_controller.go)."""
    with_ray = manager_config(operator)["integrations"]["frameworks"]
    without = manager_config(operator, ray_jobs=False)["integrations"]["frameworks"]
    assert with_ray == ["batch/job", INTEGRATIONS[operator], "ray.io/rayjob"]
    assert without == ["batch/job", INTEGRATIONS[operator]]
    for ray_jobs, frameworks in ((True, with_ray), (False, without)):
        values = kueue_values(operator, ray_jobs=ray_jobs)["managerConfig"]
        config = yaml.safe_load(values["controllerManagerConfigYaml"])
        assert config["integrations"]["frameworks"] == frameworks
    assert set(INTEGRATIONS) <= set(KINDS)  # keyed by job.api


def test_every_stack_installs_kueue_with_quota_from_its_node_groups(stack_runs):
    for stack, run in stack_runs.items():
        config = stack_file_config(stack)
        groups = config["trainstack:gpuNodeGroups"]
        (chart,) = [r for r in run.of_type(RELEASE) if r.inputs["chart"] == "kueue"]
        assert chart.inputs["version"] == KUEUE_VERSION
        flavors = {
            f.inputs["metadata"]["name"]: f.inputs["spec"] for f in kind(run, "ResourceFlavor")
        }
        assert sorted(flavors) == sorted([*(g["name"] for g in groups), "system"])
        gpu_taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
        for group in groups:
            # Tainted, and no toleration of its own: Kueue counts a flavor's tolerations when it
            # checks its taints, so one would let a head without any take GPU quota.
            assert flavors[group["name"]] == {
                "nodeLabels": {GROUP_LABEL: group["name"]},
                "nodeTaints": [gpu_taint],
            }
        assert flavors["system"] == {"nodeLabels": SYSTEM_NODE_LABELS}
        (queue,) = kind(run, "ClusterQueue")
        (resource_group,) = queue.inputs["spec"]["resourceGroups"]
        order = [f["name"] for f in resource_group["flavors"]]
        assert order == [*(g["name"] for g in groups), "system"]  # GPU flavors first
        for flavor in resource_group["flavors"]:
            assert [r["name"] for r in flavor["resources"]] == list(COVERED_RESOURCES)
        quota = {f["name"]: f["resources"] for f in resource_group["flavors"]}
        system = {r["name"]: r["nominalQuota"] for r in quota["system"]}
        assert system == {
            "cpu": "4",
            "memory": "16Gi",
            "nvidia.com/gpu": "0",
            "vpc.amazonaws.com/efa": "0",
            "hugepages-2Mi": "0",
        }
        for group in groups:
            instance = INSTANCE_TYPES[group["instanceType"]]
            got = {r["name"]: r["nominalQuota"] for r in quota[group["name"]]}
            assert got["nvidia.com/gpu"] == str(instance.gpus * group["maxSize"])
            efa = instance.efa_interfaces if instance.has_efa else 0
            assert got["vpc.amazonaws.com/efa"] == str(efa * group["maxSize"])
            assert got["cpu"] == str(instance.vcpus * group["maxSize"])
            memory = instance.memory_gib * group["maxSize"] * 2**30
            assert parse_quantity(got["memory"]) == memory
            assert got["memory"] == canonical_binary(instance.memory_gib * group["maxSize"], "Gi")
        (local,) = kind(run, "LocalQueue")
        assert local.inputs["metadata"]["namespace"] == "training"
        assert local.inputs["spec"]["clusterQueue"] == queue.inputs["metadata"]["name"]
        assert run.outputs["local_queue"] == local.inputs["metadata"]["name"]
        (priorities,) = [
            g for g in run.of_type("kubernetes:yaml/v2:ConfigGroup") if "priorit" in g.name
        ]
        objs = priorities.inputs["objs"]
        assert {o["kind"] for o in objs} == {"WorkloadPriorityClass"}
        classes = {o["metadata"]["name"]: o["value"] for o in objs}
        assert classes["high"] > classes["default"] > classes["low"]


def with_kueue(value):
    config = copy.deepcopy(stack_file_config("dev"))
    config["trainstack:kueue"] = value
    return config


def test_the_system_flavor_holds_the_quota_the_settings_give():
    run = run_program(with_kueue({"systemQuota": {"cpu": 12, "memoryGiB": 1024}}), "sysquota")
    (queue,) = kind(run, "ClusterQueue")
    (resource_group,) = queue.inputs["spec"]["resourceGroups"]
    (system,) = [f for f in resource_group["flavors"] if f["name"] == "system"]
    quota = {r["name"]: r["nominalQuota"] for r in system["resources"]}
    assert quota["cpu"] == "12" and quota["memory"] == "1Ti" and quota["nvidia.com/gpu"] == "0"


def test_a_gpu_node_group_may_not_take_the_system_flavors_name():
    config = copy.deepcopy(stack_file_config("dev"))
    config["trainstack:gpuNodeGroups"][0]["name"] = "system"
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(config, "bad", mocks)
    assert str(raised.value).startswith("trainstack:gpuNodeGroups[0].name: 'system' is the")
    assert mocks.declared == []


def test_kueue_can_be_left_out():
    run = run_program(with_kueue({"enabled": False}), "nokueue")
    assert kind(run, "ClusterQueue") == [] and run.outputs["local_queue"] is None


@pytest.mark.parametrize(
    "value, key, words",
    [
        ({"localQueue": "Team_A"}, "trainstack:kueue.localQueue", "is not a DNS-1123 label"),
        ({"queues": 1}, "trainstack:kueue.queues", "unknown setting; allowed:"),
        (
            {"systemQuota": {"cpu": 0}},
            "trainstack:kueue.systemQuota.cpu",
            "must be >= 1",
        ),
        (
            {"systemQuota": {"memory": "16Gi"}},
            "trainstack:kueue.systemQuota.memory",
            "unknown setting; allowed:",
        ),
        (
            {"priorityClasses": {"high": "urgent"}},
            "trainstack:kueue.priorityClasses.high",
            "expected a whole number",
        ),
    ],
)
def test_bad_kueue_settings_fail_in_one_line(value, key, words):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(with_kueue(value), "bad", mocks)
    message = str(raised.value)
    assert message.startswith(f"{key}: ") and words in message and "\n" not in message
    assert mocks.declared == []
