"""Fail a deploy when ECR's scan of the image found anything at or above a severity.

    python3 images/scan_gate.py --image <registry>/<repo>@sha256:<digest> [--fail-at HIGH]

Runs before `pulumi up` (deploy workflow, images/deploy.sh): standard library and the `aws`
CLI only, so it runs on a bare runner or in CodeBuild. The image pushed with attestations is an
index; ECR scans its platform image, so the gate resolves the linux/amd64 manifest first, waits
for that scan to finish, then reads its severity counts. Exit 0: clean below the threshold;
1: findings at or above it (listed); 2: bad input (one message naming the flag).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable

SEVERITIES = ("INFORMATIONAL", "LOW", "MEDIUM", "HIGH", "CRITICAL")
"""ECR's severities, lowest first (UNDEFINED findings are never blocking)."""
DEFAULT_FAIL_AT = "HIGH"
EXIT_FINDINGS, EXIT_BAD_INPUT = 1, 2
_IMAGE = re.compile(
    r"^(?P<registry>[\w.-]+)/(?P<repository>[^@:]+)@(?P<digest>sha256:[0-9a-f]{64})$"
)
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


class GateError(ValueError):
    """Input the gate cannot judge; the message names the flag."""


def blocking_findings(counts: dict[str, int], fail_at: str) -> dict[str, int]:
    """The severities at or above `fail_at` that have findings."""
    if fail_at not in SEVERITIES:
        raise GateError(f"--fail-at {fail_at!r}: allowed {', '.join(SEVERITIES)}")
    floor = SEVERITIES.index(fail_at)
    return {
        severity: count
        for severity, count in counts.items()
        if severity in SEVERITIES and SEVERITIES.index(severity) >= floor and count > 0
    }


def platform_digest(manifest: dict, digest: str) -> str:
    """The linux/amd64 image of an index (attestation manifests skipped), else `digest`."""
    if manifest.get("mediaType") not in INDEX_TYPES and "manifests" not in manifest:
        return digest
    for entry in manifest["manifests"]:
        platform = entry.get("platform", {})
        attestation = entry.get("annotations", {}).get("vnd.docker.reference.type")
        if attestation is None and (platform.get("os"), platform.get("architecture")) == (
            "linux",
            "amd64",
        ):
            return entry["digest"]
    raise GateError(f"--image {digest}: the index has no linux/amd64 image")


Aws = Callable[..., str]


def aws_cli(*args: str) -> str:
    return subprocess.run(["aws", *args], check=True, capture_output=True, text=True).stdout


def scan_counts(image: str, region: str | None, aws: Aws = aws_cli) -> tuple[str, dict]:
    """(scanned digest, severity -> count) for an image reference."""
    match = _IMAGE.match(image)
    if not match:
        raise GateError(f"--image {image!r}: expected <registry>/<repository>@sha256:<digest>")
    where = ["--repository-name", match["repository"]]
    if region:
        where += ["--region", region]
    manifest = aws(
        "ecr", "batch-get-image", *where, "--image-ids", f"imageDigest={match['digest']}",
        "--accepted-media-types", *INDEX_TYPES,
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "--query", "images[0].imageManifest", "--output", "text",
    )  # fmt: skip
    digest = platform_digest(json.loads(manifest), match["digest"])
    image_id = ["--image-id", f"imageDigest={digest}"]
    aws("ecr", "wait", "image-scan-complete", *where, *image_id)
    counts = aws(
        "ecr", "describe-image-scan-findings", *where, *image_id,
        "--query", "imageScanFindings.findingSeverityCounts", "--output", "json",
    )  # fmt: skip
    return digest, json.loads(counts) or {}


def main(argv: list[str] | None = None, aws: Aws = aws_cli) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True, help="<registry>/<repo>@sha256:<digest>")
    parser.add_argument(
        "--fail-at",
        default=os.environ.get("SCAN_FAIL_SEVERITY") or DEFAULT_FAIL_AT,
        help=f"lowest blocking severity (env SCAN_FAIL_SEVERITY; default {DEFAULT_FAIL_AT})",
    )
    parser.add_argument("--region", default=os.environ.get("AWS_REGION"))
    args = parser.parse_args(argv)
    try:
        blocking_findings({}, args.fail_at)  # a bad threshold fails before any AWS call
        digest, counts = scan_counts(args.image, args.region, aws)
        blocking = blocking_findings(counts, args.fail_at)
    except GateError as error:
        print(f"scan_gate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    summary = ", ".join(f"{s} {counts[s]}" for s in reversed(SEVERITIES) if counts.get(s))
    if blocking:
        print(
            f"scan_gate: {args.image} (scanned {digest}) has findings at or above "
            f"{args.fail_at}: {summary}; not deploying",
            file=sys.stderr,
        )
        return EXIT_FINDINGS
    print(f"scan_gate: {digest} passes (fail at {args.fail_at}; found: {summary or 'nothing'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
