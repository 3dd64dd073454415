"""PATCH as the Kubernetes API server applies it, for the API test double (test-only).

The Content-Type picks the semantics, as in the apiserver's patch handler
(k8s.io/apiserver pkg/endpoints/handlers/patch.go):
- `application/merge-patch+json`: RFC 7386 (objects merged, lists replaced, null deletes).
- `application/strategic-merge-patch+json`: lists merged by their patch merge key, with the
  `$patch` directives (`fake_strategic_merge.py`). Built-in kinds only: a custom resource
  answers 415, because the CRD handler does not list this type.
- `application/json-patch+json`: RFC 6902, applied by the `jsonpatch` package.
- `application/apply-patch+yaml` (server-side apply): nothing in trainstack sends it and this
  double does not fake field management, so it answers 501 rather than pretend.
The client picks the type (kubernetes 35, `client/rest.py`): core API patches with a dict body
go out as strategic merge, with a list as JSON patch; `CustomObjectsApi` always sends merge-patch.
"""

from __future__ import annotations

import copy
import json

from testing_support.k8s.fake_strategic_merge import (
    OBJECT_META,
    SCHEMAS,
    PatchError,
    strategic_merge_patch,
)

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
    """What the apiserver enforces on any patch result (apiserver's patch.go `applyPatch`,
    the registry's update preconditions)."""
    if not isinstance(patched, dict):
        raise PatchError(422, "Invalid", "the patched object is not a JSON object")
    meta, was = patched.setdefault("metadata", {}), current["metadata"]
    for key, what in (("name", "the name on the URL"), ("namespace", "the request's namespace")):
        if key in was:
            meta.setdefault(key, was[key])
        if meta.get(key) != was.get(key):
            raise PatchError(
                400,
                "BadRequest",
                f"the {key} of the object ({meta.get(key)}) does not match {what} ({was.get(key)})",
            )
    conflict = f'Operation cannot be fulfilled on "{was["name"]}": '
    sent = meta.get("resourceVersion")
    if sent and sent != was.get("resourceVersion"):
        # A resourceVersion in the patch is a precondition, as on update.
        raise PatchError(
            409,
            "Conflict",
            conflict + "the object has been modified; please apply your changes to the "
            "latest version and try again",
        )
    if meta.setdefault("uid", was["uid"]) != was["uid"]:
        raise PatchError(
            409,
            "Conflict",
            conflict + f"Precondition failed: UID in precondition: {meta['uid']}, "
            f"UID in object meta: {was['uid']}",
        )
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
