"""What the pods may read and write on S3, checked at launch against the stack's grants.

A stack file (`python -m infra.stack_defaults`) carries the stack output `s3_grants` as
`storage.grants.<role>`: `[{url: s3://bucket/prefix/, access: read|readwrite}]`, one list per pod
role (infra/bucket_layout.py). A job whose pods would get AccessDenied on one of its s3:// URLs
is refused in one line naming the URL and the grant that would cover it, before anything is
rendered or submitted. With no grants (no stack, or a stack file from before grants) nothing is
checked here; the pods' role still decides.
"""

from __future__ import annotations

from typing import Any

from jobs.errors import JobConfigError

READWRITE = "readwrite"
ROLE_NAMES = {"training": "training pods", "data_prepare": "data-prepare pods"}
_GLOB = "*?["


def _literal(url: str) -> str:
    """`bucket/key` up to the first glob character (a glob reads what its prefix lists)."""
    path = url.removeprefix("s3://")
    cut = min((path.index(c) for c in _GLOB if c in path), default=len(path))
    return path[:cut]


def covers(grant_url: str, url: str) -> bool:
    """Whether the grant on `s3://bucket/prefix/` covers `url` (an object or a prefix)."""
    granted = grant_url.removeprefix("s3://").rstrip("/") + "/"  # s3://b/runs never runs-x
    path = _literal(url)
    globbed = path != url.removeprefix("s3://")  # s3://b/runs* also lists b/runs-payroll/
    return path.startswith(granted) or (not globbed and path == granted.rstrip("/"))


def _suggestion(url: str, access: str) -> str:
    """The `trainstack:dataAccess` entry that would cover `url` (its parent prefix)."""
    bucket, _, key = _literal(url).partition("/")
    prefix = key.rstrip("/").rpartition("/")[0] if not url.endswith("/") else key.rstrip("/")
    where = f"prefix: {prefix}, " if prefix else ""
    return f"trainstack:dataAccess [{{bucket: {bucket}, {where}access: {access}}}]"


def grant_problem(url: str, grants: list[Any], role: str, *, write: bool) -> str | None:
    """Why the pods of `role` could not read (or write) `url` under `grants`, or None."""
    needed = READWRITE if write else "read"
    usable = [g for g in grants if not write or g["access"] == READWRITE]
    if any(covers(g["url"], url) for g in usable):
        return None
    bucket = _literal(url).partition("/")[0]
    same_bucket = [
        g["url"] for g in usable if g["url"].removeprefix("s3://").startswith(f"{bucket}/")
    ]
    layout = f"put it under {' or '.join(same_bucket)} or add " if same_bucket else "add "
    return (
        f"{url!r} is outside the {ROLE_NAMES[role]}' {needed} grants (the pods would get "
        f"AccessDenied); {layout}{_suggestion(url, needed)} to the stack and re-run "
        "`python -m infra.stack_defaults`"
    )


def check_urls(grants: list[Any], role: str, urls: list[tuple[str, str, bool]]) -> None:
    """Raise JobConfigError for the first (key, url, write) the role's grants do not cover;
    nothing is checked when the stack published no grants."""
    if not grants:
        return
    for key, url, write in urls:
        if not url.startswith("s3://"):
            continue
        problem = grant_problem(url, grants, role, write=write)
        if problem:
            raise JobConfigError(key, problem)
