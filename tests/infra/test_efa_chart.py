"""The EFA device plugin lands on exactly our EFA nodes: render the chart's own template with
the values the stack passes, and read the node selection off the rendered DaemonSet.

No `helm` binary installs from PyPI or Debian here, so the pinned chart's files are vendored
(`charts/aws-efa-k8s-device-plugin`, see SOURCE.md) and rendered by Go's text/template with the
sprig functions (py-go-template: the Go library Helm itself uses, compiled for Python). The one
Helm-engine function text/template lacks, `include` (used only for names and labels), is
replaced by the helper's name; everything deciding scheduling is the chart's own template.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import go_template
import pytest
import yaml

from infra.cluster_addons import efa_plugin_values
from infra.gpu_nodes import EFA_LABEL
from infra.settings.versions import EFA_DEVICE_PLUGIN

CHART = Path(__file__).parent / "charts" / "aws-efa-k8s-device-plugin"


def coalesce(defaults: dict, overrides: dict) -> dict:
    """Helm's value merge: maps merge key by key, anything else is replaced."""
    merged = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def render_daemonset(values: dict, tmp_path: Path) -> dict:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    text = (CHART / "templates" / "_helpers.tpl").read_text() + (
        CHART / "templates" / "daemonset.yaml"
    ).read_text()
    text = re.sub(r'include ("[^"]+") \.', r"(print \1)", text)
    source = tmp_path / "daemonset.tpl"
    source.write_text(text)
    context = {
        "Values": coalesce(yaml.safe_load((CHART / "values.yaml").read_text()), values),
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": "x"},
        "Release": {"Name": "efa", "Namespace": "kube-system", "Service": "Helm"},
    }
    rendered = go_template.render(source, context).decode()
    assert not rendered.startswith(("parse template failed", "render template failed")), rendered
    (daemonset,) = [d for d in yaml.safe_load_all(rendered) if d]
    return daemonset


def node_selection(daemonset: dict) -> tuple[list[list[dict]], dict]:
    spec = daemonset["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [t["matchExpressions"] for t in terms["nodeSelectorTerms"]], spec.get("nodeSelector")


def test_vendored_chart_is_the_pinned_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["name"] == EFA_DEVICE_PLUGIN["chart"]
    assert chart["version"] == EFA_DEVICE_PLUGIN["version"]


def test_stack_values_select_the_efa_label(tmp_path):
    terms, node_selector = node_selection(render_daemonset(efa_plugin_values(), tmp_path))
    (expressions,) = terms
    keys = {e["key"]: e for e in expressions}
    assert keys[EFA_LABEL]["operator"] == "In" and keys[EFA_LABEL]["values"] == ["true"]
    assert "node.kubernetes.io/instance-type" not in keys  # the chart's default list is gone
    assert node_selector is None


def test_stack_values_tolerate_the_gpu_taint(tmp_path):
    spec = render_daemonset(efa_plugin_values(), tmp_path)["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]


def test_the_chart_ignores_affinity(tmp_path):
    """Why the stack does not pass `affinity`: the template never reads it (the old values
    did, and the plugin then ran on any node of a listed instance type)."""
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    terms, _ = node_selection(render_daemonset({"affinity": mine}, tmp_path))
    assert terms[0][0]["key"] == "node.kubernetes.io/instance-type"


@pytest.mark.parametrize("selector", [{EFA_LABEL: "true"}])
def test_the_chart_reads_node_selector(tmp_path, selector):
    _, node_selector = node_selection(render_daemonset({"nodeSelector": selector}, tmp_path))
    assert node_selector == selector
