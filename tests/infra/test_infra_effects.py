"""What the stack does on a real account, read off what it declares under mocks: which
resources are protected, who can decrypt the bucket, who can reach the API and from where,
what the autoscaler sees, and what the network gives a private cluster."""

from __future__ import annotations

import json

import pytest
import yaml

from infra.settings import versions
from tests.infra.pulumi_harness import ACCOUNT, REPO, StackRun, run_program, stack_file_config
from tests.infra.test_infra_stack import by_id, gpu_node_groups

KEY = "aws:kms/key:Key"
BUCKET = "aws:s3/bucket:Bucket"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
PROJECT = "aws:codebuild/project:Project"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
RELEASE = "kubernetes:helm.sh/v3:Release"
ASG_TAG = "aws:autoscaling/tag:Tag"


def stateful(run: StackRun) -> list:
    """The runs bucket, every KMS key the stack creates (the images key too: every image is
    encrypted with it), and FSx."""
    return [*run.of_type(BUCKET), *run.of_type(KEY), *run.of_type(FSX)]


def deploy_project(run: StackRun):
    (project,) = [p for p in run.of_type(PROJECT) if p.name.endswith("-deploy")]
    return project


# --- data protection -------------------------------------------------------------------------


def test_prod_protects_and_retains_what_holds_data(stack_runs):
    run = stack_runs["prod"]
    protected = stateful(run)
    assert {r.type for r in protected} == {BUCKET, KEY, FSX}
    # runs bucket, EKS secrets, images
    assert len([r for r in protected if r.type == KEY]) == 3
    for resource in protected:
        assert resource.opts.protect and resource.opts.retain_on_delete, resource.name
    for key in run.of_type(KEY):
        assert key.inputs["deletionWindowInDays"] == 30, key.name
    # Nothing else is pinned: the rest of the stack can be replaced or destroyed freely.
    others = [r for r in run.resources if r not in protected]
    assert not any(r.opts.protect for r in others)


def test_dev_is_throwaway(stack_runs):
    run = stack_runs["dev"]
    assert not any(r.opts.protect or r.opts.retain_on_delete for r in run.resources)
    assert all(
        k.inputs["deletionWindowInDays"] == 7 for k in run.of_type(KEY) if "-images" not in k.name
    )
    (bucket,) = run.of_type(BUCKET)
    assert bucket.inputs["forceDestroy"] is False  # a bucket with objects is never deleted


# --- FSx and the bucket's key ----------------------------------------------------------------


def fsx_statements(run: StackRun) -> list[dict]:
    (policy,) = run.of_type(KEY_POLICY)
    return json.loads(policy.inputs["policy"])["Statement"]


def test_fsx_role_may_use_the_bucket_key_through_s3_only(stack_runs):
    run = stack_runs["prod"]
    (policy,) = run.of_type(KEY_POLICY)
    (runs_key,) = [k for k in run.of_type(KEY) if k.name.endswith("-runs")]
    assert policy.inputs["keyId"] == f"{runs_key.name}-id"
    statements = {s["Sid"]: s for s in fsx_statements(run)}
    assert statements["AccountIamPolicies"]["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
    fsx = statements["FsxLinkedBucketThroughS3"]
    (file_system,) = run.of_type(FSX)
    assert fsx["Principal"]["AWS"] == (
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
        f"AWSServiceRoleForFSxS3Access_{file_system.name}-id"
    )
    assert {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(fsx["Action"])
    (bucket,) = run.of_type(BUCKET)
    # Bucket keys are on, so S3 asks KMS with the bucket's ARN as encryption context.
    assert fsx["Condition"] == {
        "StringEquals": {
            "kms:CallerAccount": ACCOUNT,
            "kms:ViaService": "s3.us-east-1.amazonaws.com",
            "kms:EncryptionContext:aws:s3:arn": bucket.state["arn"],
        }
    }


def test_key_statement_follows_the_link_that_creates_the_role(stack_runs):
    """KMS refuses a policy naming a role that does not exist yet; FSx creates it with the
    link."""
    run = stack_runs["prod"]
    (policy,) = run.of_type(KEY_POLICY)
    link = run.one("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert link.urn in policy.opts.dependencies


def test_key_statement_exactly_when_fsx_links_the_bucket(stack_runs):
    assert stack_runs["dev"].of_type(FSX) == []
    assert stack_runs["dev"].of_type(KEY_POLICY) == []  # the default key policy stays


def test_external_runs_key_is_used_not_created():
    key_arn = "arn:aws:kms:us-east-1:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"
    config = stack_file_config("dev")
    config["trainstack:runsKmsKeyArn"] = key_arn
    run = run_program(config, "byok")
    assert [k for k in run.of_type(KEY) if k.name.endswith("-runs")] == []
    sse = run.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs["rules"][0]["applyServerSideEncryptionByDefault"]
    assert sse["kmsMasterKeyId"] == key_arn
    trainer = next(
        p
        for p in run.of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.endswith("-trainer-inline")
    )
    keys = [
        s for s in json.loads(trainer.inputs["policy"])["Statement"] if s["Sid"].startswith("Key")
    ]
    assert [k["Resource"] for k in keys] == [key_arn]


def test_without_bucket_keys_the_context_is_the_object_arn():
    from infra.policies import bucket_key_policy

    statements = json.loads(
        bucket_key_policy(
            "aws",
            ACCOUNT,
            "eu-west-1",
            "arn:aws:s3:::b",
            bucket_keys=False,
            fsx_file_system_id="fs-1",
        )
    )["Statement"]
    condition = statements[1]["Condition"]
    assert condition["StringLike"] == {"kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::b/*"}
    assert condition["StringEquals"]["kms:ViaService"] == "s3.eu-west-1.amazonaws.com"


# --- who deploys, from where -----------------------------------------------------------------


def test_prod_is_deployed_from_inside_the_vpc(stack_runs):
    run = stack_runs["prod"]
    cluster = run.one("aws:eks/cluster:Cluster").inputs["vpcConfig"]
    assert cluster["endpointPublicAccess"] is False and cluster["endpointPrivateAccess"] is True
    project = deploy_project(run).inputs
    # In the cluster's own (private) subnets...
    assert set(project["vpcConfig"]["subnets"]) == set(cluster["subnetIds"])
    subnets = by_id(run, "aws:ec2/subnet:Subnet")
    assert all("private" in subnets[s].name for s in project["vpcConfig"]["subnets"])
    # ...and the API's security group admits HTTPS from the deploy project's group alone.
    (deploy_sg,) = project["vpcConfig"]["securityGroupIds"]
    to_api = [r.inputs for r in run.of_type(INGRESS) if r.inputs["securityGroupId"] == "sg-cluster"]
    https = [r for r in to_api if r.get("fromPort") == 443]
    assert https == [r for r in https if r["referencedSecurityGroupId"] == deploy_sg]
    assert len(https) == 1 and https[0]["toPort"] == 443 and "cidrIpv4" not in https[0]
    assert run.outputs["deploy_project_name"] == deploy_project(run).state["name"]


def test_deploy_role_has_its_own_access_entry(stack_runs):
    run = stack_runs["prod"]
    project = deploy_project(run)
    roles = {f"{r.name}-id": r for r in run.of_type("aws:iam/role:Role")}
    deploy_role = next(r for r in roles.values() if r.state["arn"] == project.inputs["serviceRole"])
    entries = {e.inputs["principalArn"] for e in run.of_type("aws:eks/accessEntry:AccessEntry")}
    assert deploy_role.state["arn"] in entries
    admin = stack_file_config("prod")["trainstack:adminRoleArn"]
    assert entries == {admin, deploy_role.state["arn"]}
    policies = {
        a.inputs["principalArn"]: a.inputs
        for a in run.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    }
    deploy = policies[deploy_role.state["arn"]]
    assert deploy["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert deploy["accessScope"] == {"type": "cluster"}
    # The in-cluster resources wait for it, so the first deploy can reach the API.
    provider = run.one("pulumi:providers:kubernetes")
    association = next(
        r
        for r in run.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
        if r.inputs["principalArn"] == deploy_role.state["arn"]
    )
    assert association.urn in provider.opts.dependencies


def test_deploy_gets_the_token_by_reference_only(stack_runs):
    project = deploy_project(stack_runs["prod"]).inputs
    secret = stack_file_config("prod")["trainstack:deploy"]["pulumiTokenSecretArn"]
    variables = {v["name"]: v for v in project["environment"]["environmentVariables"]}
    assert variables["PULUMI_ACCESS_TOKEN"] == {
        "name": "PULUMI_ACCESS_TOKEN",
        "type": "SECRETS_MANAGER",
        "value": secret,
    }
    assert variables["PULUMI_CLI_VERSION"]["value"] == versions.PULUMI_CLI_VERSION
    assert project["environment"]["privilegedMode"] is False
    role_policy = next(
        p
        for p in stack_runs["prod"].of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.endswith("-deploy-inline")
    )
    token = next(
        s
        for s in json.loads(role_policy.inputs["policy"])["Statement"]
        if s["Sid"] == "PulumiToken"
    )
    assert token == {
        "Sid": "PulumiToken",
        "Effect": "Allow",
        "Action": ["secretsmanager:GetSecretValue"],
        "Resource": secret,
    }


def test_token_in_parameter_store_is_passed_by_name():
    from infra.vpc_deploy import token_variable

    arn = "arn:aws:ssm:us-east-1:123456789012:parameter/trainstack/pulumi-token"
    assert token_variable(arn) == {
        "name": "PULUMI_ACCESS_TOKEN",
        "type": "PARAMETER_STORE",
        "value": "/trainstack/pulumi-token",
    }


def test_buildspec_runs_the_same_deploy_steps_as_the_dev_runner(stack_runs):
    """One place for the deploy's shell: the project installs, then runs images/deploy.sh
    (tests/images/test_deploy_steps.py runs this build phase against stand-in CLIs)."""
    project = deploy_project(stack_runs["prod"]).inputs
    spec = yaml.safe_load((REPO / project["source"]["buildspec"]).read_text())
    assert spec["phases"]["build"]["commands"] == ["images/deploy.sh action"]
    install = spec["phases"]["install"]["commands"]
    assert install[-1] == "make install"
    assert not any("pulumi up" in c or "trainstack" in c for c in install)
    assert "PULUMI_ACCESS_TOKEN" not in json.dumps(spec.get("env", {}))  # only the project's


def test_pulumi_cli_matches_the_sdk_pin():
    pins = dict(
        line.split("==")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line
    )
    assert pins["pulumi"] == versions.PULUMI_CLI_VERSION


def test_dev_is_deployed_from_the_configured_networks(stack_runs):
    run = stack_runs["dev"]
    vpc = run.one("aws:eks/cluster:Cluster").inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True
    assert vpc["publicAccessCidrs"] == stack_file_config("dev")["trainstack:publicAccessCidrs"]
    assert [p for p in run.of_type(PROJECT) if p.name.endswith("-deploy")] == []
    assert run.outputs["deploy_project_name"] is None


# --- autoscaling and node health --------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_autoscaler_owns_the_desired_size(stack_runs, stack):
    for group in gpu_node_groups(stack_runs[stack]):
        assert "scalingConfig.desiredSize" in group.opts.ignore_changes
        assert group.inputs["nodeRepairConfig"] == {"enabled": True}
        assert group.inputs["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "DEFAULT"}


def node_template(run: StackRun, group) -> dict[str, str]:
    asg = f"eks-{group.name}-asg"
    tags = [t.inputs for t in run.of_type(ASG_TAG) if t.inputs["autoscalingGroupName"] == asg]
    assert all(t["tag"]["propagateAtLaunch"] is False for t in tags)
    prefix = "k8s.io/cluster-autoscaler/node-template/"
    return {t["tag"]["key"].removeprefix(prefix): t["tag"]["value"] for t in tags}


def test_p5_group_scales_from_zero_with_what_a_p5_job_asks(stack_runs):
    run = stack_runs["prod"]
    (group,) = gpu_node_groups(run)
    assert group.inputs["scalingConfig"]["minSize"] == 0
    template = node_template(run, group)
    assert template == {
        "label/nvidia.com/gpu.present": "true",
        "label/vpc.amazonaws.com/efa.present": "true",
        "label/trainstack.io/node-group": "p5",
        "taint/nvidia.com/gpu": "true:NoSchedule",
        "resources/nvidia.com/gpu": "8",
        "resources/vpc.amazonaws.com/efa": "32",
        "resources/hugepages-2Mi": "5120Mi",
    }
    # The job side asks exactly what the template promises.
    from catalog.pods import HUGEPAGES_2MI

    assert template["resources/hugepages-2Mi"] == HUGEPAGES_2MI


def test_efa_nodes_reserve_the_hugepages(stack_runs):
    import base64

    templates = {
        f"{t.name}-id": t
        for t in stack_runs["prod"].of_type("aws:ec2/launchTemplate:LaunchTemplate")
    }
    (group,) = gpu_node_groups(stack_runs["prod"])
    user_data = base64.b64decode(templates[group.inputs["launchTemplate"]["id"]].inputs["userData"])
    assert b"sysctl -w vm.nr_hugepages=2560" in user_data  # 2560 x 2 MiB = 5120Mi


def autoscaler_release(run: StackRun) -> dict:
    return next(r.inputs for r in run.of_type(RELEASE) if r.inputs["chart"] == "cluster-autoscaler")


def test_autoscaler_discovers_this_cluster_with_its_own_identity(stack_runs):
    run = stack_runs["prod"]
    release = autoscaler_release(run)
    values = release["values"]
    assert values["autoDiscovery"]["clusterName"] == run.outputs["cluster_name"]
    assert values["nodeSelector"] == {"trainstack.io/role": "system"}
    account = values["rbac"]["serviceAccount"]["name"]
    associations = {
        (a.inputs["namespace"], a.inputs["serviceAccount"]): a
        for a in run.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    assert (release["namespace"], account) in associations
    assert "enable-provisioning-requests" not in values["extraArgs"]
    policy = next(
        json.loads(p.inputs["policy"])
        for p in run.of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.endswith("-autoscaler-inline")
    )
    scale = next(s for s in policy["Statement"] if "autoscaling:SetDesiredCapacity" in s["Action"])
    owned = f"aws:ResourceTag/k8s.io/cluster-autoscaler/{run.outputs['cluster_name']}"
    assert scale["Condition"] == {"StringEquals": {owned: "owned"}}


def test_provisioning_requests_switch():
    config = stack_file_config("dev")
    config["trainstack:autoscaler"] = {"provisioningRequests": True, "scaleDownIdleMinutes": 20}
    values = autoscaler_release(run_program(config, "provreq"))["values"]
    assert values["extraArgs"]["enable-provisioning-requests"] == "true"
    assert values["extraArgs"]["scale-down-unneeded-time"] == "20m"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_gpu_health_is_watched(stack_runs, stack):
    run = stack_runs[stack]
    addons = {a.inputs["addonName"] for a in run.of_type("aws:eks/addon:Addon")}
    assert "eks-node-monitoring-agent" in addons
    dcgm = next(r.inputs for r in run.of_type(RELEASE) if r.inputs["chart"] == "dcgm-exporter")
    assert dcgm["values"]["service"]["port"] == 9400


# --- Kubernetes version ----------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_cluster_is_in_standard_support(stack_runs, stack):
    cluster = stack_runs[stack].one("aws:eks/cluster:Cluster").inputs
    assert tuple(map(int, cluster["version"].split("."))) >= (1, 34)
    assert cluster["upgradePolicy"] == {"supportType": "STANDARD"}


# --- network and trust -----------------------------------------------------------------------


def nat_routes(run: StackRun) -> dict[str, str]:
    """Private subnet zone -> zone of the NAT gateway its route table sends 0.0.0.0/0 to."""
    subnets = by_id(run, "aws:ec2/subnet:Subnet")
    nats = by_id(run, "aws:ec2/natGateway:NatGateway")
    tables = by_id(run, "aws:ec2/routeTable:RouteTable")
    routes = {}
    for association in run.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation"):
        subnet = subnets[association.inputs["subnetId"]]
        if "private" not in subnet.name:
            continue
        (route,) = tables[association.inputs["routeTableId"]].inputs["routes"]
        nat = nats[route["natGatewayId"]]
        routes[subnet.inputs["availabilityZone"]] = subnets[nat.inputs["subnetId"]].inputs[
            "availabilityZone"
        ]
    return routes


def test_prod_has_a_nat_gateway_per_zone(stack_runs):
    routes = nat_routes(stack_runs["prod"])
    assert routes == {
        zone: zone for zone in stack_file_config("prod")["trainstack:availabilityZones"]
    }


def test_dev_has_one_nat_gateway_in_the_gpu_zone(stack_runs):
    run = stack_runs["dev"]
    assert len(run.of_type("aws:ec2/natGateway:NatGateway")) == 1
    gpu_zone = stack_file_config("dev")["trainstack:availabilityZones"][0]
    assert set(nat_routes(run).values()) == {gpu_zone}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_pod_identity_roles_trust_only_this_account(stack_runs, stack):
    pod_roles = [
        json.loads(r.inputs["assumeRolePolicy"])["Statement"]
        for r in stack_runs[stack].of_type("aws:iam/role:Role")
        if "pods.eks.amazonaws.com" in r.inputs["assumeRolePolicy"]
    ]
    # VPC CNI, trainer, data-prepare, cluster-autoscaler, Fluent Bit, and serving (vLLM)
    assert len(pod_roles) == 6
    for (statement,) in pod_roles:
        assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
