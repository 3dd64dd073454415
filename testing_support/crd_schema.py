"""Strict validation against the vendored upstream CRD schemas (testing_support/crds, see
SOURCE.md).

A CRD's `openAPIV3Schema` is turned into a JSON schema the way kubernetes-validate's `-strict`
schemas treat built-in kinds: every object that lists its properties and does not preserve
unknown fields gets `additionalProperties: false`, so a misspelt or misplaced field is an error
here (the API server would silently prune it). OpenAPI's `nullable` and
`x-kubernetes-int-or-string` are mapped to JSON schema; the CEL rules at the root that a create
can break (the name's pattern and length) are checked by hand: the others compare against the
old object (`self == oldSelf`) and only bite on update.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CRD_DIR = Path(__file__).parent / "crds"
CRD_FILES = {
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): (
        "trainer.kubeflow.org_clustertrainingruntimes.yaml"
    ),
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): (
        "trainer.kubeflow.org_trainingruntimes.yaml"
    ),
    ("ray.io/v1", "RayJob"): "ray.io_rayjobs.yaml",
}
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class CrdSchemaError(AssertionError):
    pass


def sha256(file_name: str) -> str:
    return hashlib.sha256((CRD_DIR / file_name).read_bytes()).hexdigest()


def crd(api_version: str, kind: str) -> dict:
    """The vendored CRD document for (apiVersion, kind)."""
    return _crd(api_version, kind)


@cache
def _crd(api_version: str, kind: str) -> dict:
    file_name = CRD_FILES[(api_version, kind)]
    with open(CRD_DIR / file_name) as stream:
        return next(d for d in yaml.load_all(stream, Loader=_Loader) if d)


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    out.pop("nullable", None)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not preserve
    ):
        out["additionalProperties"] = False
    return out


@cache
def _validator(api_version: str, kind: str) -> Any:
    import jsonschema

    document = crd(api_version, kind)
    version = api_version.split("/")[1]
    served = next(v for v in document["spec"]["versions"] if v["name"] == version)
    schema = _strict(served["schema"]["openAPIV3Schema"])
    jsonschema.validators.Draft202012Validator.check_schema(schema)
    return jsonschema.validators.Draft202012Validator(schema)


def errors(obj: dict) -> list[str]:
    """Every schema problem of `obj`, as `path: message` lines (empty when it is valid)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if (api_version, kind) not in CRD_FILES:
        return [f"(root): no vendored CRD for {api_version} {kind}"]
    found = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in _validator(api_version, kind).iter_errors(obj)
    ]
    name = (obj.get("metadata") or {}).get("name", "")
    if not _NAME.match(name):
        found.append(f"metadata.name: {name!r} must match {_NAME.pattern}")
    if len(name) > 63:
        found.append(f"metadata.name: {name!r} is longer than 63")
    for key in ("labels", "annotations"):
        for label, value in ((obj.get("metadata") or {}).get(key) or {}).items():
            if not isinstance(value, str):
                found.append(f"metadata.{key}.{label}: {value!r} is not a string")
    return found


def check(obj: dict) -> None:
    """Raise CrdSchemaError listing every problem of `obj` against its vendored CRD."""
    found = errors(obj)
    if found:
        where = f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"
        raise CrdSchemaError(f"{where}:\n  " + "\n  ".join(found))
