"""A small IAM policy evaluator for the documents the stacks record: explicit Deny beats Allow,
Allow needs a matching statement; `Action`/`NotAction` and `Resource`/`NotResource` with `*` and
`?` wildcards; the condition operators these stacks use (String*, Bool, Null, ArnLike and
ArnEquals, their `IfExists` and `ForAnyValue:` forms). Enough to ask "may this role do X on
Y?" of identity policies; it knows nothing of SCPs, boundaries or resource policies."""

from __future__ import annotations

import fnmatch
import json
from typing import Any


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, *, case: bool = True) -> bool:
    if not case:
        pattern, value = pattern.lower(), value.lower()
    # fnmatch's [...] classes are not IAM syntax: escape them.
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _condition_holds(operator: str, tests: dict, context: dict[str, Any]) -> bool:
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    any_value = base.startswith("ForAnyValue:")
    base = base.split(":", 1)[-1]
    for key, expected in tests.items():
        if base == "Null":  # "true": the key is absent; "false": it is present
            if (key not in context) != (str(expected).lower() == "true"):
                return False
            continue
        if key not in context:
            if if_exists:
                continue
            return False
        values = [str(v) for v in _as_list(context[key])]
        wanted = [str(v).lower() if base == "Bool" else str(v) for v in _as_list(expected)]
        if base in ("StringEquals", "ArnEquals", "Bool"):
            values = [v.lower() for v in values] if base == "Bool" else values
            match = [v in wanted for v in values]
        elif base in ("StringLike", "ArnLike"):
            match = [any(_glob(w, v) for w in wanted) for v in values]
        elif base == "StringNotEquals":
            match = [v not in wanted for v in values]
        elif base == "StringNotLike":
            match = [not any(_glob(w, v) for w in wanted) for v in values]
        else:
            raise NotImplementedError(operator)
        if not (any(match) if any_value else all(match)):
            return False
    return True


def _matches(statement: dict, action: str, resource: str, context: dict[str, Any]) -> bool:
    if "Action" in statement:
        hit = any(_glob(a, action, case=False) for a in _as_list(statement["Action"]))
    else:
        hit = not any(_glob(a, action, case=False) for a in _as_list(statement["NotAction"]))
    if not hit:
        return False
    if "Resource" in statement:
        hit = any(_glob(r, resource) for r in _as_list(statement["Resource"]))
    elif "NotResource" in statement:
        hit = not any(_glob(r, resource) for r in _as_list(statement["NotResource"]))
    if not hit:
        return False
    return all(
        _condition_holds(op, tests, context) for op, tests in statement.get("Condition", {}).items()
    )


def allowed(
    documents: list[str | dict], action: str, resource: str, context: dict | None = None
) -> bool:
    """Whether identity policies `documents` allow `action` on `resource` in `context`."""
    statements = []
    for document in documents:
        parsed = json.loads(document) if isinstance(document, str) else document
        statements += _as_list(parsed["Statement"])
    context = context or {}
    hits = [s for s in statements if _matches(s, action, resource, context)]
    if any(s["Effect"] == "Deny" for s in hits):
        return False
    return any(s["Effect"] == "Allow" for s in hits)


def s3_access(documents: list, object_url: str, write: bool) -> bool:
    """Whether the policies let a pod list the directory of `s3://bucket/key` and read (or also
    write and delete) the object."""
    bucket, _, key = object_url.removeprefix("s3://").partition("/")
    obj = f"arn:aws:s3:::{bucket}/{key}"
    directory = key.rpartition("/")[0]
    context = {"s3:prefix": f"{directory}/" if directory else ""}
    ok = allowed(documents, "s3:ListBucket", f"arn:aws:s3:::{bucket}", context)
    ok = ok and allowed(documents, "s3:GetObject", obj)
    if write:
        ok = ok and all(
            allowed(documents, action, obj) for action in ("s3:PutObject", "s3:DeleteObject")
        )
    return ok
