"""The grammar a value must match before it names something outside trainstack: an image
reference (the registry's) and Kubernetes object names (the API server's). Each function says
why a value is refused, or returns None; the callers put the key in front.
"""

from __future__ import annotations

import re

# Distribution's reference grammar (github.com/distribution/reference, regexp.go), without
# IPv6 hosts: [domain[:port]/]path[:tag][@digest].
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
IMAGE_NAME = re.compile(rf"^{_NAME}\Z")
IMAGE_TAG = re.compile(r"^[\w][\w.-]{0,127}\Z")
SHA256_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
IMAGE_ALLOWED = "REPOSITORY[:TAG][@sha256:<64 lower-case hex digits>], no whitespace"

LABEL_VALUE = re.compile(r"^(?=.{1,63}\Z)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
"""A Kubernetes label value (non-empty here)."""
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)


def image_reference_problem(image: str, *, tag_allowed: bool = True) -> str | None:
    """Why `image` is not a pullable reference (`tag_allowed=False`: a bare repository)."""
    if not image or any(c.isspace() for c in image):
        return "contains whitespace or is empty"
    name, _, digest = image.partition("@")
    if digest and not SHA256_DIGEST.match(digest):
        return f"digest {digest!r} is not sha256:<64 lower-case hex digits>"
    last = name.rsplit("/", 1)[-1]
    tag = None
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    if tag is not None and (not tag_allowed or not IMAGE_TAG.match(tag)):
        return f"tag {tag!r} is not allowed" if tag_allowed else "a repository has no tag"
    if not IMAGE_NAME.match(name):
        return f"repository {name!r} is not a registry path (lower-case components)"
    return None


def dns1123_label_problem(value: str) -> str | None:
    """Why `value` cannot name a namespace (a DNS-1123 label)."""
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        return (
            "a DNS-1123 label: at most 63 lower-case letters, digits and '-', alphanumeric "
            "at both ends"
        )
    return None


def dns1123_subdomain_problem(value: str) -> str | None:
    """Why `value` cannot name a service account, Secret or queue (a DNS-1123 subdomain)."""
    if len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
        return (
            "a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', alphanumeric at "
            "both ends, at most 253 characters"
        )
    return None


def image_repository(image: str) -> str:
    """`host/path` of `host/path[:tag][@digest]`."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def image_approved(image: str, repository: str | None, approved: list[str]) -> bool:
    """Whether `image` is from the stack's `repository` (exactly) or under an `approved`
    registry or repository path (by whole components, so `host` never approves `host:5000`
    nor `host/team` `host/team-b`)."""
    repo = image_repository(image)
    if repository and repo == repository.rstrip("/"):
        return True
    return any(repo.startswith(entry.rstrip("/") + "/") or repo == entry for entry in approved)
