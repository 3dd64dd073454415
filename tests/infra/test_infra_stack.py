"""Invariants over every resource the program declares, for both example stacks and for a stack
per GPU instance type in the catalog (run under Pulumi's mocks; see conftest)."""

from __future__ import annotations

import json
import re

import pytest

from catalog import INSTANCE_TYPES
from infra.settings import versions
from tests.infra.pulumi_harness import (
    REPO,
    StackRun,
    one_group_run,
    one_group_stack,
    run_program,
    stack_file_config,
)

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
RELEASE = "kubernetes:helm.sh/v3:Release"


def gpu_templates(run: StackRun) -> list:
    return [t for t in run.of_type(LAUNCH_TEMPLATE) if "networkInterfaces" in t.inputs]


def gpu_node_groups(run: StackRun) -> list:
    return [g for g in run.of_type(NODE_GROUP) if g.inputs["amiType"] == "AL2023_x86_64_NVIDIA"]


def by_id(run: StackRun, type_: str) -> dict:
    return {f"{r.name}-id": r for r in run.of_type(type_)}


def check_efa_layout(run: StackRun) -> None:
    """Interfaces = the instance's EFA count; card 0 `efa` at device 0, the rest `efa-only` at
    device 1; every interface in the group's EFA security group; placement group used."""
    groups = gpu_node_groups(run)
    templates = {f"{t.name}-id": t for t in gpu_templates(run)}
    placement_groups = {r.name: r for r in run.of_type("aws:ec2/placementGroup:PlacementGroup")}
    security_groups = by_id(run, "aws:ec2/securityGroup:SecurityGroup")
    assert groups
    for group in groups:
        (instance_type,) = group.inputs["instanceTypes"]
        instance = INSTANCE_TYPES[instance_type]
        template = templates[group.inputs["launchTemplate"]["id"]]
        interfaces = template.inputs["networkInterfaces"]
        assert len(interfaces) == instance.efa_interfaces
        assert sorted(int(i["networkCardIndex"]) for i in interfaces) == list(
            range(instance.network_cards)
        )
        for interface in interfaces:
            primary = interface["networkCardIndex"] == 0
            assert interface["deviceIndex"] == (0 if primary else 1)
            assert interface["interfaceType"] == ("efa" if primary else "efa-only")
            efa_groups = [
                g for g in interface["securityGroups"] if g in security_groups and "efa" in g
            ]
            assert len(efa_groups) == 1, interface
        assert "subnetId" not in interfaces[0]  # managed node groups reject it

        reservation = template.inputs.get("capacityReservationSpecification")
        placement = template.inputs.get("placement")
        if reservation is None:
            assert placement, f"{template.name} has no placement group"
        if placement:
            placement_group = placement_groups[placement["groupName"]]
            assert placement_group.inputs["strategy"] == "cluster"


def check_gpu_groups_in_one_zone(run: StackRun) -> None:
    subnets = by_id(run, SUBNET)
    zones = {
        subnets[s].inputs["availabilityZone"]
        for g in gpu_node_groups(run)
        for s in g.inputs["subnetIds"]
    }
    assert len(zones) == 1, zones
    all_zones = {s.inputs["availabilityZone"] for s in run.of_type(SUBNET)}
    assert len(all_zones) >= 2


def check_efa_security_groups(run: StackRun) -> None:
    """Each EFA group allows all traffic from AND to itself."""
    efa_groups = [
        f"{g.name}-id"
        for g in run.of_type("aws:ec2/securityGroup:SecurityGroup")
        if g.name.endswith("-efa")
    ]
    assert efa_groups
    for direction in ("Ingress", "Egress"):
        rules = run.of_type(f"aws:vpc/securityGroup{direction}Rule:SecurityGroup{direction}Rule")
        for group in efa_groups:
            assert any(
                r.inputs["securityGroupId"] == group
                and r.inputs.get("referencedSecurityGroupId") == group
                and r.inputs["ipProtocol"] == "-1"
                for r in rules
            ), f"{group}: no self {direction.lower()} rule"


def check_nodes(run: StackRun) -> None:
    for template in run.of_type(LAUNCH_TEMPLATE):
        assert template.inputs["metadataOptions"]["httpTokens"] == "required"
        for mapping in template.inputs["blockDeviceMappings"]:
            assert mapping["ebs"]["encrypted"] == "true"
            assert mapping["ebs"]["volumeType"] == "gp3"
    for template in gpu_templates(run):
        assert template.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1
    for group in gpu_node_groups(run):
        assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in group.inputs[
            "taints"
        ]
        assert group.inputs["labels"]["nvidia.com/gpu.present"] == "true"


def check_encryption_and_access(run: StackRun) -> None:
    cluster = run.one("aws:eks/cluster:Cluster")
    assert cluster.inputs["encryptionConfig"]["resources"] == ["secrets"]
    assert cluster.inputs["encryptionConfig"]["provider"]["keyArn"].startswith("arn:aws:kms:")
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    assert cluster.inputs["vpcConfig"]["endpointPrivateAccess"] is True
    public = cluster.inputs["vpcConfig"]["endpointPublicAccess"]
    cidrs = cluster.inputs["vpcConfig"].get("publicAccessCidrs")
    assert (public and cidrs and "0.0.0.0/0" not in cidrs) or (not public and not cidrs)
    assert len(cluster.inputs["enabledClusterLogTypes"]) == 5

    block = run.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(
        block[k]
        for k in (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
        )
    )
    ownership = run.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls").inputs
    assert ownership["rule"]["objectOwnership"] == "BucketOwnerEnforced"
    versioning = run.one("aws:s3/bucketVersioning:BucketVersioning").inputs
    assert versioning["versioningConfiguration"]["status"] == "Enabled"
    sse = run.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs["rules"][0]
    assert sse["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert sse["bucketKeyEnabled"] is True
    lifecycle = run.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    rules = lifecycle.inputs["rules"]
    assert any("abortIncompleteMultipartUpload" in r for r in rules)
    assert any("noncurrentVersionExpiration" in r for r in rules)

    # The ECR repositories and image builds: tests/infra/test_infra_ci.py.
    for key in run.of_type("aws:kms/key:Key"):
        assert key.inputs["enableKeyRotation"] is True


UNSCOPABLE_ACTIONS = {
    "ecr:GetAuthorizationToken",
    # CodeBuild's VPC access: EC2 takes no resource for these calls.
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
}


def read_only(action: str) -> bool:
    return action.split(":")[1].startswith(("Describe", "Get", "List"))


def check_iam_scoped(run: StackRun) -> None:
    """A `*` resource only for calls IAM cannot scope (reads, ECR login, CodeBuild's network
    interfaces) or under a condition; the training role sees runs/ only."""
    policies = run.of_type(ROLE_POLICY)
    assert policies
    for policy in policies:
        for statement in json.loads(policy.inputs["policy"])["Statement"]:
            if statement["Effect"] == "Deny":  # a deny on * only takes rights away
                continue
            resources = statement["Resource"]
            resources = resources if isinstance(resources, list) else [resources]
            actions = statement["Action"]
            actions = actions if isinstance(actions, list) else [actions]
            if "*" in resources or any(r.endswith(":*:*") for r in resources):
                assert "Condition" in statement or all(
                    read_only(a) or a in UNSCOPABLE_ACTIONS for a in actions
                ), (policy.name, statement)
    trainer = next(p for p in policies if p.name.endswith("-trainer-inline"))
    statements = json.loads(trainer.inputs["policy"])["Statement"]
    objects = next(s for s in statements if "s3:PutObject" in s["Action"])
    assert [r.split(":::", 1)[1].split("/", 1)[1] for r in objects["Resource"]] == ["runs/*"]
    listing = next(s for s in statements if s["Action"] == "s3:ListBucket")
    assert "runs/*" in listing["Condition"]["StringLike"]["s3:prefix"]
    assert not any(a.startswith("s3:") and a.endswith("*") for s in statements for a in s["Action"])
    associations = {
        a.inputs["serviceAccount"]: a.inputs
        for a in run.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    assert associations["trainer"]["roleArn"].endswith("-trainer")
    assert associations["data-prepare"]["roleArn"].endswith("-data-prepare")
    assert associations["cluster-autoscaler"]["namespace"] == "kube-system"
    builders = [p for p in policies if p.name.endswith("-codebuild-inline")]
    assert builders
    for builder in builders:  # the image build writes only its artifact prefix
        puts = [
            s
            for s in json.loads(builder.inputs["policy"])["Statement"]
            if "s3:PutObject" in s["Action"]
        ]
        assert [s["Resource"] for s in puts] == [puts[0]["Resource"]]
        assert puts[0]["Resource"].endswith("/image-builds/*")


def check_helm_releases(run: StackRun) -> None:
    """Every chart is the one pinned in infra.settings.versions; the device plugins select GPU/EFA
    nodes through values their templates read (EFA: see test_efa_chart) and tolerate the GPU
    taint."""
    releases = {r.inputs["chart"]: r.inputs for r in run.of_type(RELEASE)}
    assert releases == {c["chart"]: releases[c["chart"]] for c in versions.HELM_CHARTS}
    for chart in versions.HELM_CHARTS:
        assert releases[chart["chart"]]["version"] == chart["version"]
        assert releases[chart["chart"]]["repositoryOpts"]["repo"] == chart["repo"]
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    nvidia = releases["nvidia-device-plugin"]["values"]
    efa = releases["aws-efa-k8s-device-plugin"]["values"]
    dcgm = releases["dcgm-exporter"]["values"]
    for values in (nvidia, efa, dcgm):
        assert toleration in values["tolerations"]
    terms = nvidia["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.present"
    assert efa["supportedInstanceLabels"] == {
        "keys": ["vpc.amazonaws.com/efa.present"],
        "values": ["true"],
    }
    assert "affinity" not in efa  # the chart never reads it
    assert dcgm["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def check_structure(run: StackRun) -> None:
    """Every AWS/Kubernetes resource is a child of a trainstack component, named from it; no
    deprecated *V2 S3 resources; no invokes (nothing looked up or fetched)."""
    for resource in run.resources:
        assert "V2" not in resource.type, resource.type
        if resource.type.startswith("trainstack:"):
            continue
        parent_chain = resource.urn.split("::")[2]
        assert parent_chain.startswith("trainstack:infra:"), resource.urn
        assert resource.name.startswith(run.outputs["cluster_name"]), resource.name
    assert run.invokes == []


def check_outputs(run: StackRun, config: dict) -> None:
    groups = config["trainstack:gpuNodeGroups"]
    at_max = sum(g["maxSize"] * INSTANCE_TYPES[g["instanceType"]].hourly_usd for g in groups)
    idle = sum(g.get("minSize", 0) * INSTANCE_TYPES[g["instanceType"]].hourly_usd for g in groups)
    assert run.outputs["gpu_hourly_usd_at_max"] == pytest.approx(at_max)
    assert run.outputs["gpu_hourly_usd_idle"] == pytest.approx(idle)
    assert [g["instance_type"] for g in run.outputs["gpu_node_groups"]] == [
        g["instanceType"] for g in groups
    ]
    kubeconfig = json.loads(run.outputs["kubeconfig"])
    assert kubeconfig["users"][0]["user"]["exec"]["args"][:2] == ["eks", "get-token"]
    assert run.outputs["storage_root"] == f"s3://{run.outputs['bucket']}/runs"
    assert run.outputs["namespace"] == "training"
    assert run.outputs["service_account"] == "trainer"
    assert run.outputs["repository_url"].endswith("/trainstack/trainer")


ALL_CHECKS = (
    check_efa_layout,
    check_gpu_groups_in_one_zone,
    check_efa_security_groups,
    check_nodes,
    check_encryption_and_access,
    check_iam_scoped,
    check_helm_releases,
    check_structure,
)


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_example_stack(stack_runs, stack, check):
    check(stack_runs[stack])


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_example_stack_outputs(stack_runs, stack):
    check_outputs(stack_runs[stack], stack_file_config(stack))


def test_prod_has_shared_filesystem_and_ci(stack_runs):
    run = stack_runs["prod"]
    fsx = run.one("aws:fsx/lustreFileSystem:LustreFileSystem").inputs
    assert fsx["deploymentType"] == "PERSISTENT_2"
    assert fsx["storageCapacity"] == 4800
    assert fsx["kmsKeyId"].startswith("arn:aws:kms:")
    association = run.one("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation").inputs
    assert association["dataRepositoryPath"] == f"s3://{run.outputs['bucket']}/datasets/"
    lustre_sg = next(
        f"{g.name}-id"
        for g in run.of_type("aws:ec2/securityGroup:SecurityGroup")
        if g.name.endswith("-lustre")
    )
    ingress = run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    for source in (lustre_sg, "sg-cluster"):  # the file system itself and the nodes
        ports = {
            (r.inputs["fromPort"], r.inputs["toPort"])
            for r in ingress
            if r.inputs["securityGroupId"] == lustre_sg
            and r.inputs["referencedSecurityGroupId"] == source
        }
        assert ports == {(988, 988), (1018, 1023)}, source
    back_to_nodes = {
        (r.inputs["fromPort"], r.inputs["toPort"])
        for r in ingress
        if r.inputs["securityGroupId"] == "sg-cluster"
        and r.inputs["referencedSecurityGroupId"] == lustre_sg
    }
    assert back_to_nodes == {(988, 988), (1018, 1023)}
    claim = run.one("kubernetes:core/v1:PersistentVolumeClaim").inputs
    assert claim["metadata"]["namespace"] == "training"
    addons = {a.inputs["addonName"] for a in run.of_type("aws:eks/addon:Addon")}
    assert "aws-fsx-csi-driver" in addons
    assert "aws-fsx-csi-driver" not in {
        a.inputs["addonName"] for a in stack_runs["dev"].of_type("aws:eks/addon:Addon")
    }


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_cluster_addons_and_ci(stack_runs, stack):
    run = stack_runs[stack]
    addons = {a.inputs["addonName"]: a.inputs for a in run.of_type("aws:eks/addon:Addon")}
    assert {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"} <= set(addons)
    assert addons["vpc-cni"]["podIdentityAssociations"][0]["serviceAccount"] == "aws-node"
    assert "eks-node-monitoring-agent" in addons
    # The training operator (Kubeflow Trainer by default): test_infra_kubeflow_trainer.py.
    # CodeBuild, its webhook and the nightly rule: tests/infra/test_infra_ci.py.
    entries = [e.inputs["principalArn"] for e in run.of_type("aws:eks/accessEntry:AccessEntry")]
    assert stack_file_config(stack)["trainstack:adminRoleArn"] in entries
    log_groups = run.of_type("aws:cloudwatch/logGroup:LogGroup")
    assert log_groups and all(g.inputs["retentionInDays"] > 0 for g in log_groups)
    endpoints = {
        e.inputs["serviceName"].removeprefix("com.amazonaws.us-east-1.")
        for e in run.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    }
    assert endpoints == {"s3", "ecr.api", "ecr.dkr", "sts", "logs", "ec2", "eks-auth"}


@pytest.mark.parametrize("instance_type", sorted(INSTANCE_TYPES))
def test_every_catalog_instance_type(instance_type):
    config = one_group_stack(instance_type)
    run = one_group_run(instance_type)
    for check in (
        check_efa_layout,
        check_gpu_groups_in_one_zone,
        check_efa_security_groups,
        check_nodes,
        check_structure,
    ):
        check(run)
    check_outputs(run, config)


def test_capacity_block_group_skips_placement_group():
    config = stack_file_config("prod")
    config["trainstack:gpuNodeGroups"][0].update(
        capacityReservationId="cr-0123456789abcdef0",
        capacityBlock=True,
        capacityBlockEnd="2026-12-01T11:30:00Z",
        minSize=4,
        desiredSize=4,
    )
    run = run_program(config, "block")
    (template,) = gpu_templates(run)
    assert template.inputs["instanceMarketOptions"]["marketType"] == "capacity-block"
    target = template.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target["capacityReservationId"] == "cr-0123456789abcdef0"
    assert "placement" not in template.inputs
    assert run.of_type("aws:ec2/placementGroup:PlacementGroup") == []
    (group,) = gpu_node_groups(run)
    assert group.inputs["capacityType"] == "CAPACITY_BLOCK"
    check_efa_layout(run)
    assert run.outputs["gpu_hourly_usd_idle"] == pytest.approx(4 * 55.040)
    # A full reservation has no spare instance to surge into: replace in place.
    assert group.inputs["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
    # Scaled to zero an hour before the block ends (EC2 reclaims it 30 minutes before).
    (schedule,) = run.of_type("aws:autoscaling/schedule:Schedule")
    assert schedule.inputs["startTime"] == "2026-12-01T10:30:00Z"
    assert (schedule.inputs["minSize"], schedule.inputs["maxSize"]) == (0, 0)
    assert schedule.inputs["desiredCapacity"] == 0
    assert schedule.inputs["autoscalingGroupName"] == f"eks-{group.name}-asg"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_readme_costs_match_the_stack_outputs(stack_runs, stack):
    readme = (REPO / "README.md").read_text()
    row = re.search(rf"^\| `{stack}` \|[^|]+\| \$([\d.]+)/h \| \$([\d.]+)/h \|$", readme, re.M)
    assert row, f"README has no cost row for {stack}"
    outputs = stack_runs[stack].outputs
    assert float(row.group(1)) == round(outputs["gpu_hourly_usd_idle"], 2)
    assert float(row.group(2)) == round(outputs["gpu_hourly_usd_at_max"], 2)
