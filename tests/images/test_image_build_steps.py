"""images/build.sh's decisions, run for real with bash, against stand-ins for the `aws` and
`docker` CLIs (no Docker engine or AWS account here). The stand-in keeps an ECR repository's
tags in a directory and logs every call, so the tests see what would be built, run and pushed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REPOSITORY_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack-trainer"
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER_DIGEST = "sha256:" + "f" * 64

STAND_IN = r"""#!/usr/bin/env python3
import hashlib, os, sys
from pathlib import Path
state = Path(os.environ["STAND_IN_STATE"])
tags = state / "tags"
tags.mkdir(parents=True, exist_ok=True)
tool, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(state / "calls.log", "a") as log:
    log.write(" ".join([tool, *args]) + "\n")
def arg(flag):
    return args[args.index(flag) + 1]
if tool == "docker":
    if args[0] == "login":
        sys.stdin.read()
    elif args[0] == "push":
        tag = args[1].rsplit(":", 1)[1]
        (tags / tag).write_text("sha256:" + hashlib.sha256(tag.encode()).hexdigest())
    elif args[0] == "run":
        sys.exit(int(os.environ.get("STAND_IN_SELFTEST_EXIT", "0")))
    elif args[:2] == ["buildx", "inspect"]:
        sys.exit(1)
    sys.exit(0)
if args[:2] == ["ecr", "get-login-password"]:
    print("password")
elif args[:2] == ["ecr", "describe-images"]:
    if os.environ.get("STAND_IN_DENY"):
        sys.exit("An error occurred (AccessDeniedException) when calling DescribeImages")
    tag = tags / arg("--image-ids").split("=", 1)[1]
    if not tag.exists():
        sys.exit("An error occurred (ImageNotFoundException) when calling DescribeImages")
    print(tag.read_text())
elif args[:2] == ["ecr", "batch-get-image"]:
    (state / "fetched").write_text(arg("--image-ids").split("=", 1)[1])
    print("application/vnd.oci.image.manifest.v1+json" if "MediaType" in arg("--query") else "{}")
elif args[:2] == ["ecr", "put-image"]:
    tag = tags / arg("--image-tag")
    if tag.exists():
        sys.exit("An error occurred (ImageTagAlreadyExistsException)")
    tag.write_text((state / "fetched").read_text())
else:
    sys.exit(f"stand-in: unexpected call {args}")
"""


@pytest.fixture
def build(tmp_path):
    """Run one build.sh step in a scratch copy of the working directory CodeBuild would use."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("aws", "docker"):
        (bin_dir / tool).write_text(STAND_IN)
        (bin_dir / tool).chmod(0o755)
    state = tmp_path / "state"
    workdir = tmp_path / "src"
    workdir.mkdir()

    def step(name: str, **env: str) -> subprocess.CompletedProcess:
        base = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "STAND_IN_STATE": str(state),
            "REPOSITORY_URI": REPOSITORY_URI,
            "AWS_REGION": "us-east-1",
            "CODEBUILD_RESOLVED_SOURCE_VERSION": SHA,
        }
        return subprocess.run(
            ["bash", str(REPO / "images/build.sh"), name],
            cwd=workdir,
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=30,
        )

    log = state / "calls.log"
    step.calls = lambda: log.read_text().splitlines() if log.exists() else []  # type: ignore[attr-defined]
    step.tags = state / "tags"  # type: ignore[attr-defined]
    step.outputs = lambda: json.loads((workdir / "image.json").read_text())  # type: ignore[attr-defined]
    step.env_file = workdir / "image.env"  # type: ignore[attr-defined]
    return step


def run_all(build, **env) -> list[subprocess.CompletedProcess]:
    results = []
    for name in ("login", "build", "selftest", "push"):
        results.append(build(name, **env))
        assert results[-1].returncode == 0, results[-1].stderr
    return results


def test_new_commit_is_built_self_tested_then_pushed_and_its_digest_exported(build):
    run_all(build, CODEBUILD_SOURCE_REPO_URL="https://github.com/acme/trainstack")
    calls = build.calls()
    order = [next(i for i, c in enumerate(calls) if c.startswith(p)) for p in (
        "docker login", "docker buildx build", "docker run", "docker push")]  # fmt: skip
    assert order == sorted(order)
    buildx = next(c for c in calls if c.startswith("docker buildx build"))
    assert f"--tag {REPOSITORY_URI}:{SHA}" in buildx and "--load" in buildx
    assert f"--build-arg GIT_SHA={SHA}" in buildx
    assert "--build-arg SOURCE_URL=https://github.com/acme/trainstack" in buildx
    assert f"--cache-from type=registry,ref={REPOSITORY_URI}:buildcache" in buildx
    assert "--cache-to type=registry" in buildx and "ignore-error=true" in buildx
    assert f"docker run --rm {REPOSITORY_URI}:{SHA} python -m trainer.smoke" in calls
    digest = (build.tags / SHA).read_text()
    assert build.outputs() == {
        "repository": REPOSITORY_URI,
        "git_sha": SHA,
        "version": "",
        "digest": digest,
        "image": f"{REPOSITORY_URI}@{digest}",
        "pushed": True,
    }
    assert build.env_file.read_text() == (
        f"IMAGE_URI={REPOSITORY_URI}@{digest}\nIMAGE_DIGEST={digest}\n"
    )


def test_failed_self_test_stops_before_anything_is_pushed(build):
    assert build("build").returncode == 0
    assert build("selftest", STAND_IN_SELFTEST_EXIT="1").returncode == 1
    assert not any(c.startswith("docker push") for c in build.calls())


def test_commit_already_in_ecr_is_reused_not_rebuilt_or_overwritten(build):
    build.tags.mkdir(parents=True)
    (build.tags / SHA).write_text(OTHER_DIGEST)
    results = run_all(build)
    assert "already in ECR" in results[1].stdout
    assert not any(c.startswith(("docker buildx build", "docker run", "docker push"))
                   for c in build.calls())  # fmt: skip
    assert build.outputs()["digest"] == OTHER_DIGEST


def test_commit_pushed_by_a_concurrent_build_is_adopted_not_overwritten(build):
    for name in ("login", "build", "selftest"):
        assert build(name).returncode == 0
    (build.tags / SHA).write_text(OTHER_DIGEST)  # the other build of this commit pushed first
    result = build("push")
    assert result.returncode == 0, result.stderr
    assert "appeared in ECR during this build" in result.stdout
    assert not any(c.startswith("docker push") for c in build.calls())
    assert (build.tags / SHA).read_text() == OTHER_DIGEST
    assert build.outputs()["digest"] == OTHER_DIGEST


def test_semver_tag_is_added_to_the_same_digest(build):
    run_all(build, GIT_TAG="v1.2.3")
    digest = (build.tags / SHA).read_text()
    assert (build.tags / "1.2.3").read_text() == digest
    assert build.outputs()["version"] == "1.2.3"


def test_existing_semver_tag_elsewhere_is_never_overwritten(build):
    build.tags.mkdir(parents=True)
    (build.tags / "1.2.3").write_text(OTHER_DIGEST)
    for name in ("login", "build", "selftest"):
        assert build(name, CODEBUILD_WEBHOOK_TRIGGER="tag/v1.2.3").returncode == 0
    result = build("push", CODEBUILD_WEBHOOK_TRIGGER="tag/v1.2.3")
    assert result.returncode == 1
    assert f"tag 1.2.3 already exists in ECR with digest {OTHER_DIGEST}" in result.stderr
    assert "refusing to overwrite" in result.stderr
    assert (build.tags / "1.2.3").read_text() == OTHER_DIGEST


def test_pull_request_build_is_tested_but_not_pushed(build):
    run_all(build, CODEBUILD_WEBHOOK_EVENT="PULL_REQUEST_UPDATED")
    assert not any(c.startswith("docker push") for c in build.calls())
    assert build.outputs()["pushed"] is False
    assert not (build.tags / SHA).exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GIT_TAG": "release-7"}, "git tag release-7 is not semver"),
        ({"CODEBUILD_RESOLVED_SOURCE_VERSION": "main"}, "main is not a full git SHA"),
        ({"REPOSITORY_URI": ""}, "REPOSITORY_URI is not set"),
        ({"STAND_IN_DENY": "1"}, "aws ecr describe-images for tag"),
    ],
)
def test_bad_input_fails_before_building_with_one_clear_message(build, env, message):
    result = build("build", **env)
    assert result.returncode == 1
    assert message in result.stderr
    assert not any(c.startswith("docker buildx build") for c in build.calls())


def test_unknown_step_lists_the_allowed_ones(build):
    result = build("deploy")
    assert result.returncode == 1
    assert "unknown step 'deploy'; allowed: login, build, selftest, push" in result.stderr
