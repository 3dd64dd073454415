"""Run the real Pulumi program under Pulumi's mocks and record every resource it declares.

Mocks are process-global, so every run installs a fresh monitor; nothing here reaches AWS,
Kubernetes, Helm repositories or GitHub (mocks intercept every registration and invoke).
"""

from __future__ import annotations

import functools
import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime.mocks import MockMonitor

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "infra" / "__main__.py"
ACCOUNT = "123456789012"


@dataclass(frozen=True)
class Options:
    """The resource options the engine would act on, as the program sent them."""

    protect: bool = False
    retain_on_delete: bool = False
    ignore_changes: tuple[str, ...] = ()
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    dependencies: tuple[str, ...] = ()
    """URNs of the resources this one waits for (`depends_on` and inputs' sources)."""


@dataclass
class Declared:
    type: str
    name: str
    urn: str
    inputs: dict[str, Any]
    state: dict[str, Any]
    opts: Options = field(default_factory=Options)


class OptionsRecordingMonitor(MockMonitor):
    """The mock monitor, also keeping each registration's options (mocks only see inputs)."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.options: dict[str, Options] = {}

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        self.options[response.urn] = Options(
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            ignore_changes=tuple(request.ignoreChanges),
            replace_on_changes=tuple(request.replaceOnChanges),
            delete_before_replace=bool(request.deleteBeforeReplace),
            dependencies=tuple(request.dependencies),
        )
        return response


# The ARN each resource type has in AWS, so that policies naming them read like the deployed
# ones (IAM and parliament match actions to resource types by these shapes).
ARN_FORMATS = {
    "aws:iam/role:Role": "arn:aws:iam::{account}:role/{name}",
    "aws:iam/policy:Policy": "arn:aws:iam::{account}:policy/{name}",
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": (
        "arn:aws:iam::{account}:oidc-provider/token.actions.githubusercontent.com"
    ),
    "aws:kms/key:Key": "arn:aws:kms:us-east-1:{account}:key/{name}-id",
    "aws:ecr/repository:Repository": "arn:aws:ecr:us-east-1:{account}:repository/{name}",
    "aws:codebuild/project:Project": "arn:aws:codebuild:us-east-1:{account}:project/{name}",
    "aws:cloudwatch/logGroup:LogGroup": "arn:aws:logs:us-east-1:{account}:log-group:{name}",
    "aws:eks/cluster:Cluster": "arn:aws:eks:us-east-1:{account}:cluster/{name}",
    "aws:ec2/subnet:Subnet": "arn:aws:ec2:us-east-1:{account}:subnet/{name}-id",
    "aws:ec2/vpc:Vpc": "arn:aws:ec2:us-east-1:{account}:vpc/{name}-id",
    "aws:ec2/securityGroup:SecurityGroup": (
        "arn:aws:ec2:us-east-1:{account}:security-group/{name}-id"
    ),
}


def realistic_arn(type_: str, service: str, name: str) -> str:
    default = "arn:aws:{service}:us-east-1:{account}:{name}"
    return ARN_FORMATS.get(type_, default).format(service=service, account=ACCOUNT, name=name)


class RecordingMocks(pulumi.runtime.Mocks):
    """Answers like AWS would for the properties the program reads back (ids, ARNs, names)."""

    def __init__(self) -> None:
        self.declared: list[Declared] = []
        self.invokes: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        state = dict(args.inputs)
        service = args.typ.split(":")[1].split("/")[0]
        resource_id = f"{args.name}-id"
        state.setdefault("name", args.name)
        state.setdefault("arn", realistic_arn(args.typ, service, str(state["name"])))
        if args.typ == "aws:s3/bucket:Bucket":
            state.update(bucket=resource_id, arn=f"arn:aws:s3:::{resource_id}")
        elif args.typ == "aws:eks/cluster:Cluster":
            state["endpoint"] = "https://ABC.gr7.us-east-1.eks.amazonaws.com"
            state["certificateAuthority"] = {"data": "Q0VSVA=="}
            state["vpcConfig"] = {**state["vpcConfig"], "clusterSecurityGroupId": "sg-cluster"}
        elif args.typ == "aws:ecr/repository:Repository":
            state["repositoryUrl"] = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/{state['name']}"
        elif args.typ == "aws:kms/key:Key":
            state["keyId"] = resource_id
        elif args.typ == "aws:eks/nodeGroup:NodeGroup":
            state["resources"] = [{"autoscalingGroups": [{"name": f"eks-{args.name}-asg"}]}]
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
        elif args.typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state.update(dnsName="fs.fsx.us-east-1.amazonaws.com", mountName="abcdefgh")
        self.declared.append(Declared(args.typ, args.name, "", dict(args.inputs), state))
        return resource_id, state

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.invokes.append(args.token)
        return {}, None


@dataclass
class StackRun:
    resources: list[Declared]
    outputs: dict[str, Any]
    invokes: list[str] = field(default_factory=list)

    def of_type(self, type_: str) -> list[Declared]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> Declared:
        found = self.of_type(type_)
        assert len(found) == 1, f"expected one {type_}, got {[r.name for r in found]}"
        return found[0]


def stack_file_config(stack: str) -> dict[str, Any]:
    """The `config:` of Pulumi.<stack>.yaml as structured values."""
    return yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"]


def as_pulumi_config(config: dict[str, Any]) -> dict[str, str]:
    """What the Pulumi engine hands a program: strings; structured values as JSON."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, str):
            flat[key] = value
        elif isinstance(value, bool):
            flat[key] = "true" if value else "false"
        elif isinstance(value, int | float):
            flat[key] = str(value)
        else:
            flat[key] = json.dumps(value)
    return flat


def run_program(
    config: dict[str, Any], stack: str = "test", mocks: RecordingMocks | None = None
) -> StackRun:
    mocks = mocks or RecordingMocks()
    monitor = OptionsRecordingMonitor(mocks)
    pulumi.runtime.set_mocks(
        mocks, project="trainstack", stack=stack, preview=False, monitor=monitor
    )
    pulumi.runtime.set_all_config(as_pulumi_config(config))
    exported: dict[str, Any] = {}

    @pulumi.runtime.test
    def program():
        module = runpy.run_path(str(PROGRAM), run_name="__main__")
        return pulumi.Output.all(**module["outputs"]).apply(exported.update)

    program()
    by_key = {}
    for registration in monitor.resources.values():
        _, _, type_chain, name = registration.urn.split("::", 3)
        by_key[(type_chain.split("$")[-1], name)] = registration.urn
    for declared in mocks.declared:
        declared.urn = by_key.get((declared.type, declared.name), "")
        declared.opts = monitor.options.get(declared.urn, Options())
    return StackRun(mocks.declared, exported, mocks.invokes)


def one_group_stack(instance_type: str) -> dict[str, Any]:
    """The dev stack with one GPU node group, of `instance_type`."""
    config = stack_file_config("dev")
    config["trainstack:gpuNodeGroups"] = [
        {"name": "gpu", "instanceType": instance_type, "minSize": 1, "desiredSize": 2, "maxSize": 4}
    ]
    return config


@functools.cache
def one_group_run(instance_type: str) -> StackRun:
    """The program run on `one_group_stack(instance_type)`, once per session: the per-type
    checks (test_infra_stack.py) and the EFA counts against AWS's figures (test_efa_counts.py)
    read the same run. Callers only read it. (Here, not in a test module: pytest imports test
    modules under their own names, so a cache there would exist twice.)"""
    return run_program(one_group_stack(instance_type), "typecheck")
