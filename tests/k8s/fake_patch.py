"""PATCH as the Kubernetes API server applies it, for the API test double (test-only).

The Content-Type picks the semantics, as in the apiserver's patch handler
(k8s.io/apiserver pkg/endpoints/handlers/patch.go):
- `application/merge-patch+json`: RFC 7386 (objects merged, lists replaced, null deletes).
- `application/strategic-merge-patch+json`: lists with a patch merge key are merged by it, `$patch`
  / `$deleteFromPrimitiveList` / `$setElementOrder` / `$retainKeys` directives (a port of
  k8s.io/apimachinery pkg/util/strategicpatch/patch.go `mergeMap`/`mergeSlice`). Built-in kinds
  only: a custom resource answers 415, because the CRD handler does not list this type.
- `application/json-patch+json`: RFC 6902, applied by the `jsonpatch` package.
- `application/apply-patch+yaml` (server-side apply): nothing in trainstack sends it and this
  double does not fake field management, so it answers 501 rather than pretend.
The client picks the type (kubernetes 35, `client/rest.py`): core API patches with a dict body
go out as strategic merge, with a list as JSON patch; `CustomObjectsApi` always sends merge-patch.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
# In the order the apiserver lists them in its 415 message (installer.go and, for custom
# resources, apiextensions-apiserver's customresource_handler.go; CBOR is behind a feature gate).
BUILT_IN_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)
CUSTOM_RESOURCE_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)
BUILT_IN_GROUPS = {
    "",  # core: /api/v1
    "apps",
    "batch",
    "policy",
    "apiextensions.k8s.io",
    "rbac.authorization.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "networking.k8s.io",
    "coordination.k8s.io",
}
"""API groups compiled into the apiserver; any other group (kubeflow.org, kueue.x-k8s.io) is a
custom resource, decoded as Unstructured, where strategic merge has no struct tags to follow."""


@dataclass(frozen=True)
class ListOf:
    """A list field with `patchStrategy: merge`: maps merged by `key`, or (key None) a set of
    scalars. A list field absent from the table is atomic: a patch replaces it whole."""

    key: str | None
    item: dict = field(default_factory=dict)
    """The schema of each element (for lists of maps)."""


# Patch merge keys of the kinds the double serves, from the `patchStrategy:"merge"` /
# `patchMergeKey` struct tags in k8s.io/api core/v1/types.go, batch/v1/types.go and
# k8s.io/apimachinery pkg/apis/meta/v1/types.go. Map-valued fields not named here (labels,
# annotations, data, resources, ...) merge key by key; lists not named here (tolerations,
# args, command, ...) are atomic and replaced.
OBJECT_META = {"ownerReferences": ListOf("uid"), "finalizers": ListOf(None)}
CONTAINER = {
    "ports": ListOf("containerPort"),
    "env": ListOf("name"),
    "volumeMounts": ListOf("mountPath"),
    "volumeDevices": ListOf("devicePath"),
}
POD_SPEC = {
    "containers": ListOf("name", CONTAINER),
    "initContainers": ListOf("name", CONTAINER),
    "ephemeralContainers": ListOf("name", CONTAINER),
    "volumes": ListOf("name"),  # merge,retainKeys
    "imagePullSecrets": ListOf("name"),
    "hostAliases": ListOf("ip"),
    "topologySpreadConstraints": ListOf("topologyKey"),
    "schedulingGates": ListOf("name"),
    "resourceClaims": ListOf("name"),  # merge,retainKeys
}
CONDITIONS = {"conditions": ListOf("type")}
SCHEMAS: dict[str, dict] = {
    "pods": {
        "metadata": OBJECT_META,
        "spec": POD_SPEC,
        "status": CONDITIONS | {"podIPs": ListOf("ip"), "hostIPs": ListOf("ip")},
    },
    "nodes": {
        "metadata": OBJECT_META,
        "spec": {"podCIDRs": ListOf(None)},
        "status": CONDITIONS | {"addresses": ListOf("type")},
    },
    "namespaces": {"metadata": OBJECT_META, "status": CONDITIONS},
    "serviceaccounts": {"metadata": OBJECT_META, "secrets": ListOf("name")},
    "jobs": {
        "metadata": OBJECT_META,
        "spec": {"template": {"metadata": OBJECT_META, "spec": POD_SPEC}},
        "status": CONDITIONS,
    },
}
"""Per resource (plural); a built-in resource not listed has ObjectMeta's keys only."""


class PatchError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def apply_patch(
    group: str, plural: str, content_type: str, current: dict, body: bytes, sub: str | None = None
) -> dict:
    """The object `current` becomes once the PATCH `body` of `content_type` is applied (to the
    `status` subresource when `sub` says so); PatchError carries the status the real apiserver
    would answer instead."""
    content_type = content_type.split(";", 1)[0].strip()
    built_in = group in BUILT_IN_GROUPS
    served = BUILT_IN_PATCH_TYPES if built_in else CUSTOM_RESOURCE_PATCH_TYPES
    if content_type not in served:
        raise PatchError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(served),
        )
    if content_type == APPLY_PATCH:
        raise PatchError(501, "NotImplemented", "the test double does not serve server-side apply")
    try:
        patch = json.loads(body)
    except ValueError:
        raise PatchError(400, "BadRequest", "invalid JSON patch") from None
    original = copy.deepcopy(current)
    if content_type == JSON_PATCH:
        patched = _json_patch(original, patch)
    elif content_type == MERGE_PATCH:
        patched = merge_patch(original, patch)
    else:
        if not isinstance(patch, dict):
            raise PatchError(400, "BadRequest", "a strategic merge patch must be a JSON object")
        patched = strategic_merge_patch(
            original, patch, SCHEMAS.get(plural, {"metadata": OBJECT_META})
        )
    return _split_status(current, _checked(current, patched), sub)


def _split_status(current: dict, patched: dict, sub: str | None) -> dict:
    """The main resource ignores changes to `status` and the status subresource keeps only
    them (every kind served here that has a status has the subresource, PyTorchJob included)."""
    if sub == "status":
        rest = {k: v for k, v in current.items() if k != "status"}
        return rest | ({"status": patched["status"]} if "status" in patched else {})
    if sub is not None:
        raise PatchError(
            404, "NotFound", f"the server could not find the requested resource: {sub}"
        )
    kept = {k: v for k, v in patched.items() if k != "status"}
    return kept | ({"status": current["status"]} if "status" in current else {})


def _checked(current: dict, patched) -> dict:
    """What the apiserver enforces on any patch result that this double relies on."""
    if not isinstance(patched, dict):
        raise PatchError(422, "Invalid", "the patched object is not a JSON object")
    meta, was = patched.setdefault("metadata", {}), current["metadata"]
    if meta.get("name") != was["name"]:
        raise PatchError(
            400, "BadRequest", "the name of the object does not match the name on the URL"
        )
    sent = meta.get("resourceVersion")
    if sent and sent != was.get("resourceVersion"):
        # A resourceVersion in the patch is a precondition, as on update.
        raise PatchError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on "{was["name"]}": the object has been modified; '
            "please apply your changes to the latest version and try again",
        )
    meta["uid"] = was["uid"]
    return patched


# -- RFC 6902 and RFC 7386 ------------------------------------------------------------------------
def _json_patch(original: dict, patch) -> dict:
    import jsonpatch
    import jsonpointer

    if not isinstance(patch, list):
        raise PatchError(
            400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    try:
        operations = jsonpatch.JsonPatch(patch)
    except (jsonpatch.InvalidJsonPatch, TypeError) as exc:
        raise PatchError(400, "BadRequest", str(exc)) from None
    try:
        return operations.apply(original)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(422, "UnprocessableEntity", str(exc)) from None


def merge_patch(target, patch):
    """RFC 7386 MergePatch(target, patch)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


# -- strategic merge patch ------------------------------------------------------------------------
PATCH, RETAIN_KEYS = "$patch", "$retainKeys"
DELETE_FROM, SET_ORDER = "$deleteFromPrimitiveList/", "$setElementOrder/"


def strategic_merge_patch(original: dict, patch: dict, schema: dict) -> dict:
    """apimachinery's `mergeMap` (server side: parallel lists merged, unmatched nulls dropped)."""
    if PATCH in patch:
        directive = patch.pop(PATCH)
        if directive == "replace":
            return patch
        if directive == "delete":
            return {}
        raise PatchError(500, "InternalError", f"Unknown patch type: {directive} in map: {patch}")
    if RETAIN_KEYS in patch:
        _retain_keys(original, patch, patch.pop(RETAIN_KEYS))
    for key in [k for k in patch if k.startswith(SET_ORDER)]:
        _set_element_order(original, patch, key, schema)
    for key, value in patch.items():
        delete_list = key.startswith(DELETE_FROM)
        if delete_list:
            key = _directive_target(key, DELETE_FROM)
        if value is None:
            original.pop(key, None)
            continue
        spec = schema.get(key)
        if (
            key not in original
            or type(original[key]) is not type(value)
            or not isinstance(value, dict | list)
        ):
            if not delete_list:
                _keep(original, key, _without_directives(_without_nulls(value)))
            continue
        if isinstance(value, dict):
            original[key] = strategic_merge_patch(
                original[key], value, spec if isinstance(spec, dict) else {}
            )
        elif isinstance(spec, ListOf) or delete_list:
            spec = spec if isinstance(spec, ListOf) else ListOf(None)
            original[key] = _merge_list(original[key], value, spec, delete_list)
        else:
            original[key] = value  # an atomic list: replaced as sent
    return original


def _merge_list(original: list, patch: list, spec: ListOf, delete_list: bool = False) -> list:
    """apimachinery's `mergeSlice`."""
    if not original and not patch:
        return original
    kinds = {type(item) for item in original + patch}
    if list in kinds:
        raise PatchError(422, "UnprocessableEntity", "lists of lists are not supported")
    if len(kinds) > 1:
        raise PatchError(500, "InternalError", "list element types are not identical")
    if dict not in kinds:
        if delete_list:
            return [item for item in original if item not in patch]
        merged: list = []
        for item in original + patch:
            if item not in merged:
                merged.append(item)
        return _order(merged, patch, original, None)
    if spec.key is None:
        raise PatchError(500, "InternalError", "cannot merge lists without merge key")
    original, patch = _special_elements(original, patch, spec.key)
    merged = list(original)
    for item in patch:
        at = _find(merged, spec.key, _key_of(item, spec.key))
        if at is None:
            merged.append(item)
        else:
            merged[at] = strategic_merge_patch(merged[at], item, spec.item)
    return _order(merged, patch, original, spec.key)


def _special_elements(original: list, patch: list, key: str) -> tuple[list, list]:
    """`$patch: delete` removes the element with that key, `$patch: replace` makes the other
    patch elements the whole list."""
    plain, replace = [], False
    for item in patch:
        directive = item.get(PATCH)
        if directive is None:
            plain.append(item)
        elif directive == "delete":
            value = _key_of(item, key)
            original = [o for o in original if o.get(key) != value]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError(
                500, "InternalError", "merging lists cannot yet be specified in the patch"
            )
        else:
            raise PatchError(
                500, "InternalError", f"Unknown patch type: {directive} in map: {item}"
            )
    return (plain, []) if replace else (original, plain)


def _order(merged: list, order: list, server_order: list, key: str | None) -> list:
    """apimachinery's `normalizeElementOrder`: the elements named in `order` keep its order, the
    others (server-only) keep `server_order`'s, and the two are interleaved by `server_order`."""

    def position(items: list, item) -> int:
        ident = item.get(key) if key else item
        found = [i for i, x in enumerate(items) if (x.get(key) if key else x) == ident]
        return found[0] if found else -1

    named = [item for item in merged if position(order, item) >= 0]
    named.sort(key=lambda item: position(order, item))
    rest = [item for item in merged if position(order, item) < 0]
    rest.sort(key=lambda item: position(server_order, item))
    out = []
    while rest or named:
        left = position(server_order, rest[0]) if rest else -1
        right = position(server_order, named[0]) if named else -1
        take_left = not named or (rest and left >= 0 and right >= 0 and left < right)
        out.append((rest if take_left else named).pop(0))
    return out


def _set_element_order(original: dict, patch: dict, directive: str, schema: dict) -> None:
    """`$setElementOrder/<list>`: the full order of a merged list (kubectl sends it). One
    known difference: when the same patch also deletes and adds elements of that list, Go's
    slice aliasing lets the added elements into the server order, which can place them later."""
    order = patch.pop(directive)
    key = _directive_target(directive, SET_ORDER)
    spec = schema.get(key)
    if not isinstance(spec, ListOf) or not isinstance(order, list):
        return
    before = original.get(key)
    if key in patch:
        value = patch.pop(key)
        merged = (
            _merge_list(before, value, spec) if before is not None else _without_directives(value)
        )
    elif before is not None:
        merged = before
    else:
        return
    original[key] = _order(merged, order, before or [], spec.key)


def _retain_keys(original: dict, patch: dict, keys) -> None:
    """`$retainKeys`: clear the keys of `original` not listed (a union member switched)."""
    if not isinstance(keys, list):
        raise PatchError(400, "BadRequest", "invalid patch format of retainKeys")
    for name, value in patch.items():
        if value is not None and not name.startswith((DELETE_FROM, SET_ORDER)) and name not in keys:
            raise PatchError(400, "BadRequest", "invalid patch format of retainKeys")
    for name in [n for n in original if n not in keys]:
        del original[name]


def _directive_target(key: str, prefix: str) -> str:
    target = key[len(prefix) :]
    if not target:
        raise PatchError(400, "BadRequest", f"invalid patch format: {key}")
    return target


def _key_of(item: dict, key: str):
    if key not in item:
        raise PatchError(
            500, "InternalError", f"map: {item} does not contain declared merge key: {key}"
        )
    return item[key]


def _find(items: list, key: str, value) -> int | None:
    return next((i for i, item in enumerate(items) if item.get(key) == value), None)


def _keep(target: dict, key: str, value) -> None:
    if value is _DROPPED:
        target.pop(key, None)
    else:
        target[key] = value


_DROPPED = object()


def _without_directives(value):
    """apimachinery's `removeDirectives`: a map holding `$patch` is dropped (from its parent
    map or list) when it has nothing to merge into."""
    if isinstance(value, dict):
        if PATCH in value:
            return _DROPPED
        kept = {k: _without_directives(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not _DROPPED}
    if isinstance(value, list):
        return [v for v in map(_without_directives, value) if v is not _DROPPED]
    return value


def _without_nulls(value):
    """apimachinery's `discardNullValuesFromPatch` (what a new field is added with)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
