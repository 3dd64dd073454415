"""Turn a Pulumi stack's outputs into job config defaults, so nobody copies them by hand.

    python -m infra.stack_defaults --stack dev            # runs `pulumi stack output`
    pulumi stack output --json --show-secrets | python -m infra.stack_defaults --stack dev

Writes `stack/<stack>.yaml` in the user's config dir (jobs/config_path.py: the first entry of
$TRAINSTACK_CONFIG_PATH, else ~/.config/trainstack; never inside the installed package;
`# @package _global_`, setting only `cluster.*` (with the `approved_*` lists when the stack
exports them: `launch` then checks images, Secrets and priorities as the Training API does),
`job.image_repository`, `job.image` (the deployed digest, when the stack has one), `job.api`
(the operator the stack installed), `job.queue`, `storage.root`, `storage.grants` (what the
pods may reach on S3, checked at launch) and `storage.fsx_claim`, `cluster.log_group`
(archived container logs); select it with
`trainstack launch stack=<stack>`),
and the stack's kubeconfig to `~/.kube/trainstack-<stack>.yaml` (mode 0600) whose PATH goes in
`cluster.kubeconfig`; the kubeconfig's content never enters the config tree. Everything is
checked before anything is written; a bad input exits 2 with one message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from infra.bucket_layout import ACCESS_LEVELS, POD_ROLES
from jobs.backends.kubernetes.client.kinds import KINDS
from jobs.config_path import user_config_dir

REPO = Path(__file__).resolve().parents[1]
EXIT_BAD_INPUT = 2
REQUIRED_OUTPUTS = (
    "cluster_name",
    "region",
    "kubernetes_version",
    "kubeconfig",
    "repository_url",
    "storage_root",
    "namespace",
    "service_account",
    "gpu_node_groups",
)
APPROVAL_OUTPUTS = ("approved_images", "approved_secrets", "approved_priorities")
"""Optional outputs: `cluster.approved_images`/`approved_secrets`/`approved_priorities`, which
`launch` then checks."""
NODE_GROUP_KEYS = ("name", "instance_type", "min_size", "desired_size", "max_size")
_STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class StackOutputError(ValueError):
    """Outputs that can't become job defaults; the message names the output."""


def job_image(outputs: dict[str, Any]) -> dict[str, str]:
    """The repository, and the digest the stack deployed (output `image`) when there is one:
    jobs then run that exact image, and a rollback of `image` rolls them back too."""
    job = {"image_repository": outputs["repository_url"]}
    if outputs.get("image"):
        job["image"] = outputs["image"]
    return job


def job_api(outputs: dict[str, Any]) -> str:
    """The job API of the operator the stack installed (output `job_api`); a stack from before
    that output runs the Training Operator v1, so its jobs stay PyTorchJobs."""
    api = outputs.get("job_api") or "pytorchjob"
    if api not in KINDS:
        raise StackOutputError(f"stack output 'job_api' must be one of {tuple(KINDS)}, got {api!r}")
    return api


def job_defaults(outputs: dict[str, Any], kubeconfig_path: Path) -> dict[str, Any]:
    """The `# @package _global_` content for a stack (pure: paths are passed in)."""
    missing = [key for key in REQUIRED_OUTPUTS if outputs.get(key) in (None, "")]
    if missing:
        raise StackOutputError(
            f"stack output {missing[0]!r} is missing; need: {', '.join(REQUIRED_OUTPUTS)}"
        )
    root = outputs["storage_root"]
    if not (isinstance(root, str) and root.startswith("s3://")):
        raise StackOutputError(f"stack output 'storage_root' must be s3://..., got {root!r}")
    groups = outputs["gpu_node_groups"]
    if not isinstance(groups, list):
        raise StackOutputError("stack output 'gpu_node_groups' must be a list")
    node_groups = []
    for index, group in enumerate(groups):
        absent = [k for k in NODE_GROUP_KEYS if not isinstance(group, dict) or k not in group]
        if absent:
            raise StackOutputError(f"stack output 'gpu_node_groups[{index}]' lacks {absent[0]!r}")
        node_groups.append({key: group[key] for key in NODE_GROUP_KEYS})
    storage = {"root": root}
    grants = outputs.get("s3_grants")
    if grants is not None:
        storage["grants"] = _grants(grants)
    # Always written (null when the stack has none): `storage.fsx=true` is refused without it.
    storage["fsx_claim"] = outputs.get("fsx_claim")
    cluster_extra = {}
    if outputs.get("container_log_group"):
        cluster_extra["log_group"] = outputs["container_log_group"]
    if outputs.get("data_prepare_service_account"):
        cluster_extra["data_prepare_service_account"] = outputs["data_prepare_service_account"]
    if outputs.get("serving_role_arn"):
        cluster_extra["serving_role_arn"] = outputs["serving_role_arn"]
    approved = {}
    for key in APPROVAL_OUTPUTS:  # optional: the stack's approved registries, Secrets, priorities
        value = outputs.get(key)
        if value is None:
            continue
        if not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
            raise StackOutputError(f"stack output {key!r} must be a list of names")
        approved[key] = list(value)
    return {
        "cluster": {
            "name": outputs["cluster_name"],
            "region": outputs["region"],
            "kubeconfig": str(kubeconfig_path),
            "namespace": outputs["namespace"],
            "service_account": outputs["service_account"],
            "kubernetes_version": str(outputs["kubernetes_version"]),
            "node_groups": node_groups,
            **cluster_extra,
            **approved,
        },
        "job": job_image(outputs)
        | {"api": job_api(outputs)}
        | ({"queue": outputs["local_queue"]} if outputs.get("local_queue") else {}),
        "storage": storage,
    }


def _grants(grants: Any) -> dict[str, list[dict[str, str]]]:
    """`s3_grants` as `storage.grants`: role -> [{url: s3://bucket/prefix/, access}]."""
    if not isinstance(grants, dict):
        raise StackOutputError("stack output 's3_grants' must be an object of role -> grants")
    checked: dict[str, list[dict[str, str]]] = {}
    for role, items in grants.items():
        if role not in POD_ROLES or not isinstance(items, list):
            raise StackOutputError(f"stack output 's3_grants.{role}': unknown role or not a list")
        for index, item in enumerate(items):
            ok = isinstance(item, dict) and str(item.get("url", "")).startswith("s3://")
            if not ok or item.get("access") not in ACCESS_LEVELS:
                raise StackOutputError(
                    f"stack output 's3_grants.{role}[{index}]' needs url: s3://... and access: "
                    + "|".join(ACCESS_LEVELS)
                )
        checked[role] = [{"url": i["url"], "access": i["access"]} for i in items]
    return checked


def render(defaults: dict[str, Any], stack: str) -> str:
    header = (
        "# @package _global_\n"
        f"# Generated from Pulumi stack {stack!r} by `python -m infra.stack_defaults "
        f"--stack {stack}`;\n# re-run it after `pulumi up` instead of editing.\n"
    )
    return header + yaml.safe_dump(defaults, sort_keys=False)


def _write_private(path: Path, text: str, mode: int) -> None:
    """Atomic write: a reader sees the old file or the new one, never part of one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(handle, mode)
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_outputs(stack: str, source: str | None) -> dict[str, Any]:
    text = ""
    if source == "-" or (source is None and not sys.stdin.isatty()):
        text = sys.stdin.read()  # piped: `pulumi stack output ... | python -m ...`
    elif source:
        text = Path(source).read_text()
    if not text.strip() and source is None:
        command = ["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", stack]
        try:
            done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise StackOutputError(
                "the pulumi CLI is not on PATH; pass the outputs with --outputs FILE or -"
            ) from None
        if done.returncode:
            raise StackOutputError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
        text = done.stdout
    try:
        outputs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StackOutputError(f"stack outputs are not JSON ({exc.msg})") from None
    if not isinstance(outputs, dict):
        raise StackOutputError("stack outputs must be a JSON object")
    if outputs.get("kubeconfig") == "[secret]":
        raise StackOutputError(
            "stack output 'kubeconfig' is hidden; use `pulumi stack output --show-secrets`"
        )
    return outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.stack_defaults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", required=True, help="Pulumi stack name, e.g. dev")
    parser.add_argument(
        "-o",
        "--outputs",
        help="file with `pulumi stack output --json --show-secrets`, or - for stdin "
        "(default: piped stdin, else run the pulumi CLI)",
    )
    parser.add_argument(
        "--conf-dir",
        type=Path,
        default=None,
        help="directory the stack file goes in (default: stack/ in the user's config dir)",
    )
    parser.add_argument("--kube-dir", type=Path, default=Path.home() / ".kube")
    args = parser.parse_args(argv)
    try:
        if not _STACK_NAME.match(args.stack):
            raise StackOutputError(f"--stack {args.stack!r}: letters, digits, '.', '_', '-'")
        if args.stack == "none":
            raise StackOutputError("--stack 'none' is reserved for the shipped stack/none.yaml")
        outputs = read_outputs(args.stack, args.outputs)
        kubeconfig_path = (args.kube_dir / f"trainstack-{args.stack}.yaml").resolve()
        defaults = job_defaults(outputs, kubeconfig_path)
        kubeconfig = outputs["kubeconfig"]
        if not isinstance(kubeconfig, str) or "clusters" not in kubeconfig:
            raise StackOutputError("stack output 'kubeconfig' is not a kubeconfig document")
    except (StackOutputError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _write_private(kubeconfig_path, kubeconfig, 0o600)
    conf_dir = args.conf_dir or user_config_dir() / "stack"
    conf_path = conf_dir / f"{args.stack}.yaml"
    _write_private(conf_path, render(defaults, args.stack), 0o644)
    print(f"wrote {conf_path} (use `trainstack launch stack={args.stack}`) and {kubeconfig_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
