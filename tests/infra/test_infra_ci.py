"""The image pipeline's infrastructure under Pulumi's mocks, tried as an attacker would: what a
pull request's build can write, who can trigger a privileged builder, which tags can move."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.ci import PR_EVENTS, pull_request_filter_groups
from infra.ci_policies import ECR_WRITE_ACTIONS, only_writer_repository_policy
from infra.settings.stack import ConfigError, parse_stack_config
from tests.infra.iam_eval import allowed
from tests.infra.pulumi_harness import REPO, StackRun, run_program, stack_file_config

PROJECT = "aws:codebuild/project:Project"
WEBHOOK = "aws:codebuild/webhook:Webhook"
REPOSITORY = "aws:ecr/repository:Repository"
REPOSITORY_POLICY = "aws:ecr/repositoryPolicy:RepositoryPolicy"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
DIGEST = "sha256:" + "a" * 64


def named(run: StackRun, type_: str, suffix: str):
    """The one resource of `type_` named `<stack name><suffix>` (suffix `-image` is not
    `-pr-image`)."""
    (found,) = [r for r in run.of_type(type_) if r.name.endswith(suffix)
                and ("-pr-" in suffix or "-pr-" not in r.name)]  # fmt: skip
    return found


def statements(run: StackRun, role_suffix: str) -> list[dict]:
    policy = named(run, ROLE_POLICY, f"{role_suffix}-inline").inputs["policy"]
    return json.loads(policy)["Statement"]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def project_env(project) -> dict[str, str]:
    return {v["name"]: v["value"] for v in project.inputs["environment"]["environmentVariables"]}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_release_repository_is_immutable_outright_and_the_cache_lives_apart(stack_runs, stack):
    run = stack_runs[stack]
    release = named(run, REPOSITORY, "-trainer").inputs
    # Attack "tag overwrite": no tag of the release repository can ever be rewritten.
    assert release["imageTagMutability"] == "IMMUTABLE"
    assert not release.get("imageTagMutabilityExclusionFilters")
    assert release["imageScanningConfiguration"]["scanOnPush"] is True
    cache = named(run, REPOSITORY, "-buildcache").inputs
    assert cache["name"] == release["name"] + "-buildcache"
    assert cache["imageTagMutability"] == "MUTABLE"  # only the cache tag moves, elsewhere
    for repository in (release, cache):
        assert repository["encryptionConfigurations"][0]["encryptionType"] == "KMS"
    assert run.outputs["cache_repository_url"].endswith("/trainstack/trainer-buildcache")
    expiries = run.of_type("aws:ecr/lifecyclePolicy:LifecyclePolicy")
    assert len(expiries) == 2
    for expiry in expiries:
        assert json.loads(expiry.inputs["policy"])["rules"][0]["selection"]["tagStatus"] == (
            "untagged"
        )


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_only_the_release_build_role_can_write_either_repository(stack_runs, stack):
    run = stack_runs[stack]
    release_project = named(run, PROJECT, "-image")
    writer = release_project.inputs["serviceRole"]
    assert writer.endswith("-codebuild")
    policies = run.of_type(REPOSITORY_POLICY)
    assert sorted(p.inputs["repository"] for p in policies) == [
        "trainstack/trainer",
        "trainstack/trainer-buildcache",
    ]
    for policy in policies:
        (deny,) = json.loads(policy.inputs["policy"])["Statement"]
        assert deny["Effect"] == "Deny" and deny["Principal"] == "*"
        assert set(ECR_WRITE_ACTIONS) <= set(deny["Action"])
        assert deny["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": writer}}
    granted = statements(run, "-codebuild")
    push = next(s for s in granted if s["Sid"] == "PushTrainerImage")
    cache = next(s for s in granted if s["Sid"] == "WriteBuildCache")
    assert "ecr:PutImage" in push["Action"] and push["Resource"].endswith("/trainstack/trainer")
    assert "ecr:PutImage" in cache["Action"]
    assert cache["Resource"].endswith("/trainstack/trainer-buildcache")
    env = project_env(release_project)
    assert env["BUILD_KIND"] == "release"
    assert env["BUILD_CACHE_REPOSITORY_URI"] == run.outputs["cache_repository_url"]
    assert release_project.inputs["artifacts"]["path"] == "image-builds"


def test_pull_requests_build_on_their_own_project_whose_role_cannot_write(stack_runs):
    """Attacks "PR edits build.sh/buildspec to push" and "PR writes the cache": the pull
    request runs its own scripts, so only its role can stop it, and its role has no write."""
    run = stack_runs["prod"]
    project = named(run, PROJECT, "-pr-image")
    assert project.inputs["serviceRole"].endswith("-pr-build")
    assert project_env(project)["BUILD_KIND"] == "pull-request"
    assert project.inputs["artifacts"] == {"type": "NO_ARTIFACTS"}
    granted = statements(run, "-pr-build")
    actions = {a for s in granted for a in as_list(s["Action"])}
    assert not actions & set(ECR_WRITE_ACTIONS), actions & set(ECR_WRITE_ACTIONS)
    assert not any(a.startswith(("s3:", "kms:", "codebuild:", "iam:", "sts:")) for a in actions)
    read = next(s for s in granted if s["Sid"] == "ReadBuildCache")
    assert read["Resource"].endswith("-buildcache")  # never the release repository
    assert run.outputs["pull_request_build_project"].endswith("-pr-image")


def test_webhook_builds_only_listed_accounts_pull_requests_and_never_a_push(stack_runs):
    """Attack "fork pull request on a privileged builder": a pull request by an account not
    listed matches no filter group, and the one webhook starts the no-push project only."""
    run = stack_runs["prod"]
    hook = run.one(WEBHOOK).inputs
    assert hook["projectName"].endswith("-pr-image")
    assert hook["pullRequestBuildPolicy"] == {
        "requiresCommentApproval": "FORK_PULL_REQUESTS",
        "approverRoles": ["GITHUB_ADMIN", "GITHUB_MAINTAIN"],
    }
    actors = stack_file_config("prod")["trainstack:ci"]["pullRequestActorIds"]
    for group in hook["filterGroups"]:
        filters = {f["type"]: f["pattern"] for f in group["filters"]}
        assert filters["EVENT"] == PR_EVENTS and "PUSH" not in filters["EVENT"]
        assert filters["ACTOR_ACCOUNT_ID"] == "^(" + "|".join(actors) + ")$"
        assert filters["BASE_REF"] == "^refs/heads/main$"


def test_without_listed_accounts_no_pull_request_reaches_codebuild(stack_runs):
    run = stack_runs["dev"]
    assert not run.of_type(WEBHOOK)
    assert [p.name for p in run.of_type(PROJECT)] == ["trainstack-dev-image"]
    assert run.outputs["pull_request_build_project"] is None


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_nightly_rebuild_starts_the_release_project_as_a_nightly(stack_runs, stack):
    run = stack_runs[stack]
    target = run.one("aws:cloudwatch/eventTarget:EventTarget").inputs
    assert target["arn"].endswith("-image")
    override = json.loads(target["input"])["environmentVariablesOverride"]
    assert override == [{"name": "BUILD_KIND", "value": "nightly", "type": "PLAINTEXT"}]
    assert run.one("aws:cloudwatch/eventRule:EventRule").inputs["scheduleExpression"]


def test_filter_groups_quote_each_account_exactly():
    (group,) = pull_request_filter_groups("main", ("1", "22"))
    actor = next(f for f in group["filters"] if f["type"] == "ACTOR_ACCOUNT_ID")
    assert actor["pattern"] == "^(1|22)$"  # anchored: "122" or "1x" never matches


def test_repository_policy_spares_only_the_writer():
    (deny,) = json.loads(only_writer_repository_policy("arn:aws:iam::1:role/w"))["Statement"]
    assert "ecr:PutImage" in deny["Action"] and "ecr:BatchDeleteImage" in deny["Action"]
    assert "ecr:BatchGetImage" not in deny["Action"]  # pulls stay governed by IAM


def dev_config(**overrides) -> dict:
    config = {k.removeprefix("trainstack:"): v for k, v in stack_file_config("dev").items()}
    return {k: v for k, v in {**config, **overrides}.items() if not k.startswith("aws:")}


@pytest.mark.parametrize(
    ("overrides", "key", "allowed"),
    [
        (
            {"ci": {"githubUrl": "https://github.com/a/b", "pullRequestActorIds": ["octocat"]}},
            "trainstack:ci.pullRequestActorIds[0]",
            "numeric GitHub account id",
        ),
        (
            {"ci": {"githubUrl": "https://github.com/a/b", "githubOidcProviderArn": "github"}},
            "trainstack:ci.githubOidcProviderArn",
            "oidc-provider/token.actions.githubusercontent.com",
        ),
        ({"image": "trainstack/trainer:latest"}, "trainstack:image", "@sha256:<digest>"),
        (
            {"lastGoodImage": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/other@{DIGEST}"},
            "trainstack:lastGoodImage",
            "trainstack/trainer@sha256",
        ),
    ],
)
def test_bad_ci_settings_name_the_key(overrides, key, allowed):
    with pytest.raises(ConfigError) as error:
        parse_stack_config(dev_config(**overrides), "dev", "us-east-1")
    assert key in str(error.value) and allowed in str(error.value)


def test_deployed_and_last_good_images_are_stack_outputs():
    image = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer@{DIGEST}"
    good = image.replace("a" * 64, "b" * 64)
    config = {**stack_file_config("dev"), "trainstack:image": image}
    config["trainstack:lastGoodImage"] = good
    outputs = run_program(config, "dev").outputs
    assert outputs["image"] == image and outputs["last_good_image"] == good


def test_job_defaults_pin_the_deployed_digest():
    from infra.stack_defaults import job_image

    repository = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer"
    assert job_image({"repository_url": repository}) == {"image_repository": repository}
    pinned = job_image({"repository_url": repository, "image": f"{repository}@{DIGEST}"})
    assert pinned == {"image_repository": repository, "image": f"{repository}@{DIGEST}"}


# ---- the roles GitHub Actions assumes --------------------------------------------------------


def role(run: StackRun, suffix: str):
    (found,) = [r for r in run.of_type("aws:iam/role:Role") if r.name.endswith(suffix)]
    return found


def trust(run: StackRun, suffix: str) -> dict:
    (statement,) = json.loads(role(run, suffix).inputs["assumeRolePolicy"])["Statement"]
    return statement


DATA_READS = [
    line
    for line in (Path(__file__).parent / "data" / "readonly_data_reads.txt")
    .read_text()
    .splitlines()
    if line and not line.startswith("#")
]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_preview_role_is_read_only_and_trusts_only_the_preview_environment(stack_runs, stack):
    """`pulumi preview` runs a pull request's code: its role is an explicit allow-list of what a
    preview reads, and no data-reading action of ReadOnlyAccess is allowed on anything."""
    run = stack_runs[stack]
    statement = trust(run, "-gha-preview")
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"]["StringEquals"] == {
        "token.actions.githubusercontent.com:aud": "sts.amazonaws.com"
    }
    subjects = statement["Condition"]["StringLike"]["token.actions.githubusercontent.com:sub"]
    assert subjects == ["repo:example-org/trainstack:environment:preview"]
    attached = [
        a.inputs["policyArn"]
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.name.startswith(role(run, "-gha-preview").name)
    ]
    assert attached == []  # no managed policy: ReadOnlyAccess reads logs, queues, tables...
    granted = statements(run, "-gha-preview")
    assert all(s["Effect"] == "Allow" for s in granted)
    assert {a for s in granted for a in as_list(s["Action"])} == {"sts:GetCallerIdentity"}
    documents = [{"Statement": granted}]
    bucket = run.outputs["bucket"]
    for action in DATA_READS:
        service = action.split(":")[0]
        for resource in (
            "*",
            f"arn:aws:{service}:us-east-1:123456789012:anything",
            f"arn:aws:s3:::{bucket}/runs/r1/checkpoint/step-1/model.safetensors",
        ):
            assert not allowed(documents, action, resource), (action, resource)
    assert run.outputs["github_preview_role_arn"].endswith("-gha-preview")


def test_preview_reads_the_training_api_secret_it_looks_up_and_no_other(api_stack_run):
    """The program's one lookup (the API's token hashes) is granted by its ARN alone."""
    from tests.infra.test_infra_training_api import SECRET_ARN

    run = api_stack_run
    assert run.invokes == ["aws:secretsmanager/getSecretVersion:getSecretVersion"]
    documents = [{"Statement": statements(run, "-gha-preview")}]
    assert allowed(documents, "secretsmanager:GetSecretValue", SECRET_ARN)
    other = SECRET_ARN.rsplit(":", 1)[0] + ":other-AbCdEf"
    assert not allowed(documents, "secretsmanager:GetSecretValue", other)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_build_role_trusts_only_the_release_environment_and_starts_only_the_release_build(
    stack_runs, stack
):
    run = stack_runs[stack]
    subjects = trust(run, "-gha-build")["Condition"]["StringLike"][
        "token.actions.githubusercontent.com:sub"
    ]
    # Not refs: anyone who can push a v* tag would drive the build that writes the release
    # repository. The protected environment's rules and reviewers decide.
    assert subjects == ["repo:example-org/trainstack:environment:release"]
    granted = statements(run, "-gha-build")
    start = next(s for s in granted if s["Sid"] == "ReleaseBuild")
    assert "codebuild:StartBuild" in start["Action"]
    assert start["Resource"].endswith("-image")  # never the pull-request project
    actions = {a for s in granted if s["Effect"] == "Allow" for a in as_list(s["Action"])}
    assert not actions & set(ECR_WRITE_ACTIONS)
    documents = [{"Statement": granted}]
    project = start["Resource"]
    assert allowed(documents, "codebuild:StartBuild", project)
    override = {"codebuild:source.buildspec": "version: 0.2"}
    assert not allowed(documents, "codebuild:StartBuild", project, override)
    provider = run.one("aws:iam/openIdConnectProvider:OpenIdConnectProvider").inputs
    assert provider["url"] == "https://token.actions.githubusercontent.com"


def test_an_existing_oidc_provider_is_used_not_duplicated():
    config = stack_file_config("dev")
    provider = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"
    config["trainstack:ci"] = {**config["trainstack:ci"], "githubOidcProviderArn": provider}
    run = run_program(config, "dev")
    assert not run.of_type("aws:iam/openIdConnectProvider:OpenIdConnectProvider")
    assert trust(run, "-gha-build")["Principal"] == {"Federated": provider}


def test_the_image_job_runs_in_the_environment_the_build_role_trusts():
    import yaml

    workflow = yaml.safe_load((REPO / ".github/workflows/deploy.yml").read_text())
    assert workflow["jobs"]["image"]["environment"] == "release"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_service_role_trusts_its_service_for_this_account_and_resource_only(
    stack_runs, stack
):
    """Confused deputy: CodeBuild (release, pull-request, deploy), EventBridge and Pod Identity
    may assume a role only for this account's own project, rule or cluster."""
    run = stack_runs[stack]
    account = "123456789012"
    seen = {}
    for declared in run.of_type("aws:iam/role:Role"):
        for statement in json.loads(declared.inputs["assumeRolePolicy"])["Statement"]:
            service = (statement.get("Principal") or {}).get("Service")
            # EC2 (instance profiles) and the EKS control plane do not send the source keys
            # when they assume a role: a condition on them would lock the nodes and cluster out.
            if service in (None, "ec2.amazonaws.com", "eks.amazonaws.com"):
                continue
            condition = statement.get("Condition", {})
            assert condition.get("StringEquals", {}).get("aws:SourceAccount") == account, (
                declared.name,
                statement,
            )
            if service in ("codebuild.amazonaws.com", "events.amazonaws.com"):
                source = condition["ArnLike"]["aws:SourceArn"]
                assert f":{account}:" in source and source.endswith("-*"), source
                seen[declared.name] = source
    suffixes = {name.rsplit("-", 1)[-1] for name in seen}
    assert {"codebuild", "schedule"} <= suffixes, seen
    if stack == "prod":
        assert "deploy" in suffixes


def test_prod_images_key_is_protected_and_retained(stack_runs):
    for stack, protected in (("prod", True), ("dev", False)):
        (key,) = [
            k for k in stack_runs[stack].of_type("aws:kms/key:Key") if k.name.endswith("-images")
        ]
        assert (key.opts.protect, key.opts.retain_on_delete) == (protected, protected), stack
