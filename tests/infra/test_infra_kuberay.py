"""KubeRay in the stack (infra/kuberay.py): the pinned chart's own templates rendered with the
values the stack passes (the operator watches the training namespace alone, with namespaced RBAC,
no webhook, no GPU toleration, resources set, restricted), its CRDs applied server-side from the
same tag, and the stack under Pulumi's mocks with `trainstack:rayJobs` on and off: Kueue's
integrations, the Training API's Role and the `job_kinds` output follow it.

The chart's files are vendored (`charts/kuberay-operator`, see SOURCE.md) and rendered as
tests/infra/test_efa_chart.py renders the EFA plugin's: Go's text/template with sprig, the Helm
engine's `include` replaced by the helper's name, except the three helpers that emit content
(`validateConfig` prints nothing for valid values, the feature gates and the RBAC rules are
stubbed: what decides scheduling, scope and arguments is the chart's own template)."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path

import go_template
import pytest
import yaml

from infra.gpu_nodes import GPU_TAINT
from infra.kuberay import CRD_PLURALS, KUBERAY_VERSION, crd_urls, kuberay_values
from infra.settings import versions
from infra.settings.stack import TRAINING_OPERATORS, ConfigError, training_operators
from infra.training_api import RAYJOB_RULE, RBAC_RULES, rbac_rules
from jobs.backends.kubernetes.client.kinds import KINDS, KUBERAY_NAMESPACE, RAYJOB
from jobs.backends.kubernetes.manifest_checks import check_restricted_pod
from tests.infra.pulumi_harness import RecordingMocks, run_program, stack_file_config
from tests.infra.test_efa_chart import coalesce
from tests.infra.test_infra_kubeflow_trainer import kueue_frameworks, releases, with_operator

REPO = Path(__file__).resolve().parents[2]
CHART = Path(__file__).parent / "charts" / "kuberay-operator"
RELEASE_NAMESPACE = "kuberay-system"
CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
NAMESPACE = "kubernetes:core/v1:Namespace"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
CLUSTER_SCOPED_RBAC = {"ClusterRole", "ClusterRoleBinding"}
WEBHOOK_KINDS = {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
_CONTENT_HELPERS = (
    (r'include "kuberay-operator\.validateConfig" \.', '(print "")'),
    (r'include "kuberay\.featureGates" \.', '(print "--feature-gates=stub")'),
    (r'include "role\.consistentRules" \(dict [^)]*\)', '(print "rules: []")'),
    (r'include ("[^"]+") [.$]', r"(print \1)"),
)


def render_chart(values: dict, tmp_path: Path) -> list[dict]:
    """Every object the vendored chart renders with `values` over its defaults."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    # values.yaml leaves `watchNamespace` commented out: Helm reads a missing key as nil, the
    # renderer stops the process on it, so it is given as nil.
    defaults = {"watchNamespace": None, **yaml.safe_load((CHART / "values.yaml").read_text())}
    context = {
        "Values": coalesce(defaults, values),
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": "x"},
        "Release": {"Name": "kuberay-operator", "Namespace": RELEASE_NAMESPACE, "Service": "Helm"},
    }
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    objects = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        text = helpers + template.read_text()
        for pattern, stub in _CONTENT_HELPERS:
            text = re.sub(pattern, stub, text)
        source = tmp_path / f"{template.stem}.tpl"
        source.write_text(text)
        rendered = go_template.render(source, context).decode()
        assert not rendered.startswith(("parse template failed", "render template failed")), (
            template.name,
            rendered,
        )
        objects += [o for o in yaml.safe_load_all(rendered) if o]
    return objects


def operator_pod(objects: list[dict]) -> dict:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return deployment["spec"]["template"]


def test_the_vendored_chart_is_the_pinned_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["name"], chart["version"]) == (versions.KUBERAY["chart"], KUBERAY_VERSION)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == f"v{KUBERAY_VERSION}"


def test_every_value_the_stack_sets_is_read_by_the_chart():
    """A misspelt key (`watchNamespaces`) would be ignored by Helm without a word."""
    templates = "".join(p.read_text() for p in (CHART / "templates").iterdir())
    for key in kuberay_values("training"):
        assert f".Values.{key}" in templates, key


def test_the_operator_watches_the_training_namespace_alone(tmp_path):
    objects = render_chart(kuberay_values("training"), tmp_path)
    (container,) = operator_pod(objects)["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--watch-namespace") + 1] == "training"
    # Namespaced RBAC only: its Role where it watches, its leader election in its own namespace.
    assert not {o["kind"] for o in objects} & CLUSTER_SCOPED_RBAC
    roles = {(o["kind"], o["metadata"]["namespace"]) for o in objects if "Role" in o["kind"]}
    assert roles == {
        ("Role", "training"),
        ("RoleBinding", "training"),
        ("Role", RELEASE_NAMESPACE),
        ("RoleBinding", RELEASE_NAMESPACE),
    }


def test_the_chart_alone_would_watch_every_namespace_with_a_cluster_role(tmp_path):
    """What the two values change: the chart's defaults, rendered the same way."""
    objects = render_chart({}, tmp_path)
    (container,) = operator_pod(objects)["spec"]["containers"]
    assert "--watch-namespace" not in container["args"]
    assert {o["kind"] for o in objects} >= CLUSTER_SCOPED_RBAC


def test_no_webhook_and_no_gpu_node(tmp_path):
    objects = render_chart(kuberay_values("training"), tmp_path)
    assert not {o["kind"] for o in objects} & WEBHOOK_KINDS
    spec = operator_pod(objects)["spec"]
    (container,) = spec["containers"]
    # ray-operator/main.go starts the RayCluster webhook only for ENABLE_WEBHOOKS=true.
    assert {"name": "ENABLE_WEBHOOKS", "value": "false"} in container["env"]
    assert not [
        t for t in spec.get("tolerations") or [] if t.get("key") in (GPU_TAINT["key"], None)
    ]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "100m", "memory": "512Mi"}


def test_the_operator_pod_passes_restricted(tmp_path):
    """Its namespace enforces `restricted`, as the training namespace does."""
    check_restricted_pod(
        operator_pod(render_chart(kuberay_values("training"), tmp_path)), "kuberay"
    )


def test_the_crds_are_the_pinned_tags_and_include_the_rayjob_schema_jobs_check_against():
    urls = crd_urls()
    assert all(f"/ray-project/kuberay/v{KUBERAY_VERSION}/helm-chart/" in url for url in urls)
    assert {url.rsplit("/", 1)[1] for url in urls} == {f"ray.io_{p}.yaml" for p in CRD_PLURALS}
    # The vendored RayJob CRD (testing_support/crds, the module's config/crd/bases at the same
    # commit) is the one installed: same group and plural as the kind jobs submit.
    vendored = yaml.safe_load(
        (REPO / "testing_support" / "crds" / "ray.io_rayjobs.yaml").read_text()
    )
    assert (vendored["spec"]["group"], vendored["spec"]["names"]["plural"]) == (
        RAYJOB.group,
        RAYJOB.plural,
    )
    assert RAYJOB.plural in CRD_PLURALS and "rayclusters" in CRD_PLURALS  # RayJobs make clusters


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_stack_installs_kuberay_pinned_with_its_crds_applied_server_side(stack_runs, stack):
    run = stack_runs[stack]
    release = releases(run)["kuberay-operator"]
    assert release.inputs["version"] == KUBERAY_VERSION == "1.6.2"
    assert release.inputs["repositoryOpts"]["repo"] == versions.KUBERAY["repo"]
    assert release.inputs["namespace"] == KUBERAY_NAMESPACE == RELEASE_NAMESPACE
    assert release.inputs["values"] == kuberay_values("training")
    assert release.inputs["skipCrds"] is True  # Helm would never upgrade them
    (crds,) = [g for g in run.of_type(CONFIG_GROUP) if g.name.endswith("-kuberay-crds")]
    assert crds.inputs["files"] == crd_urls()
    (namespace,) = [
        n for n in run.of_type(NAMESPACE) if n.inputs["metadata"]["name"] == KUBERAY_NAMESPACE
    ]
    assert namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "restricted"
    )
    assert {crds.urn, namespace.urn} <= set(release.opts.dependencies)
    # Server-side apply (the provider's default) is what takes a 1.35 MB CRD.
    for provider in run.of_type("pulumi:providers:kubernetes"):
        assert str(provider.inputs.get("enableServerSideApply", "true")).lower() == "true"


def test_kueue_integrates_rayjobs_and_starts_after_kuberay(stack_runs):
    run = stack_runs["dev"]
    assert "ray.io/rayjob" in kueue_frameworks(run)
    assert releases(run)["kuberay-operator"].urn in releases(run)["kueue"].opts.dependencies


def test_the_api_role_may_submit_rayjobs_and_nothing_else_of_ray(api_stack_run):
    (role,) = [r for r in api_stack_run.of_type(ROLE) if r.name.endswith("-api")]
    ray = [rule for rule in role.inputs["rules"] if "ray.io" in rule["apiGroups"]]
    assert ray == [RAYJOB_RULE]
    assert RAYJOB_RULE == {
        "apiGroups": ["ray.io"],
        "resources": ["rayjobs"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    }
    (trainjobs,) = [r for r in RBAC_RULES if r["resources"] == ["trainjobs"]]
    assert RAYJOB_RULE["verbs"] == trainjobs["verbs"]  # handled as any job the backend follows
    assert [r for r in rbac_rules(ray_jobs=False) if "ray.io" in r["apiGroups"]] == []
    assert (*rbac_rules(ray_jobs=False), RAYJOB_RULE) == rbac_rules(ray_jobs=True)


def test_the_outputs_name_the_job_kinds_installed(stack_runs):
    for run in stack_runs.values():
        assert run.outputs["job_kinds"] == ["trainjob", "rayjob"]
        assert run.outputs["job_api"] == "trainjob"


def without_ray_jobs(config: dict) -> dict:
    config = copy.deepcopy(config)
    config["trainstack:rayJobs"] = False
    return config


def test_a_stack_can_leave_kuberay_out():
    run = run_program(without_ray_jobs(with_operator("pytorchjob")), "noray")
    assert "kuberay-operator" not in releases(run)
    assert not [g for g in run.of_type(CONFIG_GROUP) if "kuberay" in g.name]
    assert KUBERAY_NAMESPACE not in {n.inputs["metadata"]["name"] for n in run.of_type(NAMESPACE)}
    assert "ray.io/rayjob" not in kueue_frameworks(run)
    assert "kubeflow.org/pytorchjob" in kueue_frameworks(run)
    assert run.outputs["job_kinds"] == ["pytorchjob"]


def test_without_kuberay_the_api_role_names_no_rayjobs():
    from tests.infra.test_infra_training_api import run, with_api

    result = run(without_ray_jobs(with_api()))
    (role,) = [r for r in result.of_type(ROLE) if r.name.endswith("-api")]
    assert not [rule for rule in role.inputs["rules"] if "ray.io" in rule["apiGroups"]]


def test_a_ray_jobs_setting_that_is_not_a_bool_fails_in_one_line():
    config = stack_file_config("dev")
    config["trainstack:rayJobs"] = "yes"
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(config, "bad", mocks)
    message = str(raised.value)
    assert message == "trainstack:rayJobs: expected true or false, got 'yes'"
    assert mocks.declared == []


def test_rayjob_is_never_a_training_operator():
    """Even once the kubernetes backend follows RayJobs, `trainstack:trainingOperator` chooses
    between Trainer and the Training Operator v1 only; KubeRay is `trainstack:rayJobs`."""
    assert TRAINING_OPERATORS == ("trainjob", "pytorchjob")
    followed = {**KINDS, RAYJOB.api: replace(RAYJOB, followed=True)}
    assert training_operators(followed) == ("trainjob", "pytorchjob")
    config = with_operator("rayjob")
    with pytest.raises(ConfigError) as raised:
        run_program(config, "bad", RecordingMocks())
    assert str(raised.value) == (
        "trainstack:trainingOperator: 'rayjob' is not allowed; allowed: trainjob, pytorchjob"
    )
