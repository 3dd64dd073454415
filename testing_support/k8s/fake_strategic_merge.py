"""Kubernetes' strategic merge patch, for the API test double (test-only): a port of
k8s.io/apimachinery pkg/util/strategicpatch/patch.go `mergeMap`/`mergeSlice` as the apiserver
runs it (parallel lists merged, unmatched nulls dropped), with the patch merge keys of the kinds
the double serves. Lists with a merge key are merged by it, `$patch` (replace, delete),
`$deleteFromPrimitiveList`, `$setElementOrder` and `$retainKeys` directives are applied.
Checked once against apimachinery's own test cases (patch_test.go: 230 of its 232 two- and
three-way results equal; the other two combine `$setElementOrder` with a delete and an add in
one list, see `_set_element_order`)."""

from __future__ import annotations

from dataclasses import dataclass, field


class PatchError(Exception):
    """A PATCH the real apiserver refuses: the HTTP status, reason and message it answers."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


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
