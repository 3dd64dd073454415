"""The upstream objects each controller needs, read from its own Go module (the zip in the Go
module cache, downloaded at its pin): CRDs and webhook configurations, with the webhook
configurations' kustomize patches applied (the JSON6902 `op: replace` lists and the
strategic-merge `webhooks` lists their kustomizations carry) and every webhook pointed at the
controller's port on 127.0.0.1 by URL, trusting the local CA.

What each module keeps where (its own layout, read at that tag):
- sigs.k8s.io/jobset v0.12.0: config/components/{crd/bases,webhook}
- github.com/kubeflow/trainer/v2 v2.3.0: manifests/base/{crds,webhook}
- sigs.k8s.io/kueue v0.14.x: config/components/{crd/bases,webhook}
- github.com/kubeflow/training-operator v1.9.4: manifests/base/{crds,webhook}
- github.com/ray-project/kuberay/ray-operator v1.6.2: config/crd/bases (no webhook: the
  operator serves none unless ENABLE_WEBHOOKS=true, main.go)
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from pathlib import Path

import yaml

from localcluster.versions import JOBSET, KUBERAY, KUEUE, TRAINER, TRAINING_OPERATOR, Component

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class Layout:
    crds: str
    """Folder of CRD files inside the module."""
    webhook: str | None
    """Folder of the webhook kustomization inside the module (None: no webhooks)."""
    crd_files: tuple[str, ...] = ()
    """Only these files of `crds` (empty: every one)."""


LAYOUTS = {
    JOBSET.name: Layout("config/components/crd/bases", "config/components/webhook"),
    TRAINER.name: Layout("manifests/base/crds", "manifests/base/webhook"),
    KUEUE.name: Layout("config/components/crd/bases", "config/components/webhook"),
    TRAINING_OPERATOR.name: Layout("manifests/base/crds", "manifests/base/webhook"),
    # The kinds of the controllers the operator starts (RayCronJob's is behind its alpha
    # feature gate, off: pkg/features/features.go).
    KUBERAY.name: Layout(
        "config/crd/bases",
        None,
        ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml"),
    ),
}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader where PyYAML has it: KubeRay's CRDs are 3 MB of YAML (seconds each in
the pure-Python one)."""


def _documents(path: Path) -> list[dict]:
    docs = yaml.load_all(path.read_text(), Loader=_LOADER)
    return [doc for doc in docs if isinstance(doc, dict)]


def crds(component: Component, module: Path, port: int, ca_bundle: bytes) -> list[dict]:
    """The component's CRDs. A CRD serving several versions gets the conversion webhook its
    kustomization patches in (Kueue 0.19 stores v1beta2 and converts v1beta1 at /convert),
    called at https://127.0.0.1:<port>; single-version CRDs need none."""
    layout = LAYOUTS[component.name]
    folder = module / layout.crds
    paths = [folder / name for name in layout.crd_files] or sorted(folder.glob("*.yaml"))
    found = [
        doc
        for path in paths
        for doc in _documents(path)
        if doc.get("kind") == "CustomResourceDefinition"
    ]
    if not found:
        raise SystemExit(f"localcluster: no CRDs in {folder}")
    kustomization_dir = folder.parent if folder.name == "bases" else folder
    converted = set()
    kustomization = kustomization_dir / "kustomization.yaml"
    if kustomization.exists():
        for entry in yaml.safe_load(kustomization.read_text()).get("patches") or []:
            if "path" not in entry:
                continue
            for patch in _documents(kustomization_dir / entry["path"]):
                conversion = (patch.get("spec") or {}).get("conversion") or {}
                if conversion.get("strategy") == "Webhook":
                    converted.add(patch["metadata"]["name"])
    bundle = base64.b64encode(ca_bundle).decode()
    for crd in found:
        if crd["metadata"]["name"] in converted and len(crd["spec"]["versions"]) > 1:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/convert",
                        "caBundle": bundle,
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
    return found


def _pointer(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for raw in path.strip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(part) if part.isdigit() else part)
    return parts


def _json6902(target: dict, operations: list[dict]) -> None:
    """The `replace`/`add` operations kustomizations use on webhook configurations."""
    for op in operations:
        if op.get("op") not in ("replace", "add"):
            raise SystemExit(f"localcluster: unsupported kustomize patch op {op!r}")
        *parents, last = _pointer(op["path"])
        node = target
        for part in parents:
            node = node[part]
        if isinstance(node, list) and last == "-":
            node.append(op["value"])
        else:
            node[last] = op["value"]


def _merge_webhooks(target: dict, patch: dict) -> None:
    """A strategic-merge patch of a webhook configuration: webhooks merge by name."""
    by_name = {hook["name"]: hook for hook in target.get("webhooks", [])}
    for hook in patch.get("webhooks", []):
        if hook["name"] in by_name:
            by_name[hook["name"]].update(hook)


def _matches(target: dict, selector: dict | None, patch: object) -> bool:
    if selector:
        wanted = (selector.get("kind"), selector.get("name"))
        have = (target["kind"], target["metadata"]["name"])
        return all(want in (None, got) for want, got in zip(wanted, have, strict=True))
    if isinstance(patch, dict):
        return (patch.get("kind"), patch.get("metadata", {}).get("name")) == (
            target["kind"],
            target["metadata"]["name"],
        )
    return False


def webhook_configurations(
    component: Component, module: Path, port: int, ca_bundle: bytes
) -> list[dict]:
    """The component's webhook configurations, as its kustomization patches them, each
    webhook called at https://127.0.0.1:<port><path>."""
    webhook = LAYOUTS[component.name].webhook
    if webhook is None:
        return []
    folder = module / webhook
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    configs = [
        doc
        for resource in kustomization.get("resources", [])
        for doc in _documents(folder / resource)
        if doc.get("kind") in WEBHOOK_KINDS
    ]
    for entry in kustomization.get("patches", []):
        patch = (
            yaml.safe_load(entry["patch"])
            if "patch" in entry
            else yaml.safe_load((folder / entry["path"]).read_text())
        )
        for config in configs:
            if not _matches(config, entry.get("target"), patch):
                continue
            if isinstance(patch, list):
                _json6902(config, copy.deepcopy(patch))
            else:
                _merge_webhooks(config, copy.deepcopy(patch))
    bundle = base64.b64encode(ca_bundle).decode()
    for config in configs:
        name = config["metadata"]["name"]
        if name in ("mutating-webhook-configuration", "validating-webhook-configuration"):
            # The kustomizations' namePrefix, which this reader does not apply; two
            # components use the same scaffold names.
            config["metadata"] = {"name": f"{component.name}-{name}"}
        for hook in config.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
    return configs
