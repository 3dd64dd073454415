"""Kubeflow Trainer in the stack, under Pulumi's mocks: the pinned chart with JobSet, one
ClusterTrainingRuntime per GPU node group (EFA and huge pages from the catalog) and a CPU one,
Kueue integrating TrainJobs, and the outputs saying which operator runs; a stack that keeps the
Training Operator v1 gets it instead, with nothing of Trainer's."""

from __future__ import annotations

import copy

import pytest
import yaml

from catalog import INSTANCE_TYPES
from infra.settings import versions
from infra.settings.stack import ConfigError
from infra.stack_defaults import job_defaults
from jobs.backends.kubernetes.runtimes import NODE_GROUP_LABEL
from testing_support import crd_schema
from tests.infra.pulumi_harness import RecordingMocks, run_program, stack_file_config

RELEASE = "kubernetes:helm.sh/v3:Release"
RUNTIME = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"
OPERATOR_V1 = "kubernetes:kustomize/v2:Directory"


def releases(run) -> dict[str, object]:
    return {r.inputs["chart"]: r for r in run.of_type(RELEASE)}


def kueue_frameworks(run) -> list[str]:
    values = releases(run)["kueue"].inputs["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    return config["integrations"]["frameworks"]


def runtime_object(declared) -> dict:
    inputs = declared.inputs
    return {k: inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_trainer_and_jobset_are_installed_pinned(stack_runs, stack):
    run = stack_runs[stack]
    trainer = releases(run)["kubeflow-trainer"]
    assert trainer.inputs["version"] == versions.KUBEFLOW_TRAINER["version"] == "2.3.0"
    assert trainer.inputs["repositoryOpts"]["repo"] == versions.KUBEFLOW_TRAINER["repo"]
    assert trainer.inputs["values"]["jobset"] == {"install": True}
    assert trainer.inputs["values"]["runtimes"]["defaultEnabled"] is False
    assert versions.JOBSET_VERSION == "0.12.0"  # the chart's pinned dependency
    assert run.of_type(OPERATOR_V1) == []  # not both operators
    assert run.outputs["job_api"] == "trainjob"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_one_runtime_per_gpu_group_from_the_catalog_and_a_cpu_one(stack_runs, stack):
    run = stack_runs[stack]
    groups = stack_file_config(stack)["trainstack:gpuNodeGroups"]
    runtimes = {r.inputs["metadata"]["name"]: r for r in run.of_type(RUNTIME)}
    stackless = {f"trainstack-{g['instanceType'].replace('.', '-')}" for g in groups}
    assert sorted(runtimes) == sorted(
        {f"trainstack-{g['name']}" for g in groups} | stackless | {"trainstack-cpu"}
    )
    assert sorted(run.outputs["training_runtimes"]) == sorted(runtimes)
    trainer_urn = releases(run)["kubeflow-trainer"].urn
    for declared in runtimes.values():
        crd_schema.check(runtime_object(declared))
        assert trainer_urn in declared.opts.dependencies  # after the CRDs exist
        # failurePolicy is immutable (Trainer's CRD, a CEL rule): a changed runtime is
        # replaced, and deleted first since the new one has the same name.
        assert "spec" in declared.opts.replace_on_changes
        assert declared.opts.delete_before_replace
    for group in groups:
        instance = INSTANCE_TYPES[group["instanceType"]]
        spec = runtimes[f"trainstack-{group['name']}"].inputs["spec"]
        (rjob,) = spec["template"]["spec"]["replicatedJobs"]
        pod = rjob["template"]["spec"]["template"]["spec"]
        limits = pod["containers"][0]["resources"]["limits"]
        efa = instance.efa_interfaces if instance.has_efa else None
        assert limits.get("vpc.amazonaws.com/efa") == (str(efa) if efa else None)
        assert limits["nvidia.com/gpu"] == str(instance.gpus)
        assert ("hugepages-2Mi" in limits) == instance.has_efa
        assert pod["nodeSelector"][NODE_GROUP_LABEL] == group["name"]
        assert pod["serviceAccountName"] == "trainer"


def test_kueue_integrates_trainjobs_and_starts_after_trainer(stack_runs):
    run = stack_runs["dev"]
    assert "trainer.kubeflow.org/trainjob" in kueue_frameworks(run)
    assert "kubeflow.org/pytorchjob" not in kueue_frameworks(run)
    kueue = releases(run)["kueue"]
    assert releases(run)["kubeflow-trainer"].urn in kueue.opts.dependencies


def test_the_stack_file_makes_jobs_trainjobs(stack_runs, tmp_path):
    outputs = {
        **stack_runs["dev"].outputs,
        "storage_root": "s3://bucket/runs",
        "kubeconfig": "clusters: []",
    }
    assert job_defaults(outputs, tmp_path / "kubeconfig")["job"]["api"] == "trainjob"
    older = {k: v for k, v in outputs.items() if k != "job_api"}  # a stack from before Trainer
    assert job_defaults(older, tmp_path / "kubeconfig")["job"]["api"] == "pytorchjob"


def with_operator(value):
    config = copy.deepcopy(stack_file_config("dev"))
    config["trainstack:trainingOperator"] = value
    return config


def test_a_stack_can_stay_on_the_training_operator_v1():
    run = run_program(with_operator("pytorchjob"), "v1")
    operator = run.one(OPERATOR_V1).inputs
    assert operator["directory"].endswith(f"?ref={versions.TRAINING_OPERATOR_VERSION}")
    assert "kubeflow-trainer" not in releases(run)
    assert run.of_type(RUNTIME) == []
    assert run.outputs["job_api"] == "pytorchjob"
    assert run.outputs["training_runtimes"] == []
    assert "kubeflow.org/pytorchjob" in kueue_frameworks(run)
    assert "trainer.kubeflow.org/trainjob" not in kueue_frameworks(run)


def test_an_unknown_operator_fails_in_one_line():
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(with_operator("mpi"), "bad", mocks)
    message = str(raised.value)
    assert message.startswith("trainstack:trainingOperator: ") and "trainjob, pytorchjob" in message
    assert "\n" not in message and mocks.declared == []


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_render_without_a_stack_names_a_runtime_the_stack_installs(stack_runs, stack):
    """README's render (no stack) names the runtime of its instance type; `kubectl apply` of it
    on the README's own cluster must find that runtime (Trainer refuses a TrainJob whose
    runtimeRef does not exist)."""
    from tests.jobs.conftest import CLUSTER, build

    installed = {r.inputs["metadata"]["name"] for r in stack_runs[stack].of_type(RUNTIME)}
    for group in stack_file_config(stack)["trainstack:gpuNodeGroups"]:
        rendered = build([*CLUSTER, f"compute={group['instanceType']}"]).manifests
        (job,) = [m for m in rendered if m["kind"] == "TrainJob"]
        runtime = job["spec"]["runtimeRef"]["name"]
        assert runtime in installed, (runtime, sorted(installed))
        declared = next(
            r for r in stack_runs[stack].of_type(RUNTIME) if r.inputs["metadata"]["name"] == runtime
        )
        selector = declared.inputs["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
        pod = selector["spec"]["template"]["spec"]
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == group["instanceType"]
