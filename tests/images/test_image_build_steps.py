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
CACHE_URI = f"{REPOSITORY_URI}-buildcache"
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
    elif args[:2] == ["buildx", "build"] and "--load" in args:
        Path(arg("--metadata-file")).write_text(
            '{"containerimage.config.digest": "sha256:%s"}' % ("c" * 64))
    elif args[:2] == ["buildx", "build"] and "--push" in args:
        tag = arg("--tag").rsplit(":", 1)[1]
        digest = "sha256:" + hashlib.sha256(tag.encode()).hexdigest()
        (tags / tag).write_text(digest)
        config = os.environ.get("STAND_IN_PUSHED_CONFIG", "sha256:" + "c" * 64)
        Path(arg("--metadata-file")).write_text(
            '{"containerimage.config.digest": "%s", "containerimage.digest": "%s"}'
            % (config, digest))
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
            "BUILD_CACHE_REPOSITORY_URI": CACHE_URI,
            "BUILD_KIND": "release",
            "SOURCE_DATE_EPOCH": "1700000000",
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


def pushes(build) -> list[str]:
    return [c for c in build.calls() if c.startswith("docker buildx build") and "--push" in c]


def test_new_commit_is_built_self_tested_then_pushed_with_attestations(build):
    run_all(build, CODEBUILD_SOURCE_REPO_URL="https://github.com/acme/trainstack")
    calls = build.calls()
    loaded = next(i for i, c in enumerate(calls) if "--load" in c)
    tested = next(i for i, c in enumerate(calls) if c.startswith("docker run"))
    pushed = next(i for i, c in enumerate(calls) if "--push" in c)
    login = next(i for i, c in enumerate(calls) if c.startswith("docker login"))
    assert login < loaded < tested < pushed
    for build_call in (calls[loaded], calls[pushed]):
        assert f"--tag {REPOSITORY_URI}:{SHA}" in build_call
        assert f"--build-arg GIT_SHA={SHA}" in build_call
        assert "--build-arg SOURCE_DATE_EPOCH=1700000000" in build_call
        assert f"--cache-from type=registry,ref={CACHE_URI}:buildcache" in build_call
    assert "--build-arg SOURCE_URL=https://github.com/acme/trainstack" in calls[loaded]
    # SBOM and provenance travel with the pushed image; only the push writes the cache.
    assert "--sbom=true --provenance=mode=max --push" in calls[pushed]
    assert "--cache-to" not in calls[loaded]
    assert f"--cache-to type=registry,ref={CACHE_URI}:buildcache" in calls[pushed]
    assert f"docker run --rm {REPOSITORY_URI}:{SHA} python -m trainer.smoke" in calls
    assert not any(c.startswith("docker push") for c in calls)
    digest = (build.tags / SHA).read_text()
    assert build.outputs() == {
        "repository": REPOSITORY_URI,
        "git_sha": SHA,
        "kind": "release",
        "tag": SHA,
        "version": "",
        "digest": digest,
        "image": f"{REPOSITORY_URI}@{digest}",
        "pushed": True,
    }
    assert build.env_file.read_text() == (
        f"IMAGE_URI={REPOSITORY_URI}@{digest}\nIMAGE_DIGEST={digest}\n"
    )


def test_the_api_image_gets_its_own_dockerfile_tags_selftest_and_outputs(build):
    """IMAGE_KIND=api after the trainer: images/api/Dockerfile, api-<sha> in the same
    repository, a no-torch import check, api-image.* outputs; the trainer's stay intact."""
    run_all(build)
    trainer_outputs = build.outputs()
    run_all(build, IMAGE_KIND="api")
    calls = build.calls()
    api_builds = [c for c in calls if "--file images/api/Dockerfile" in c]
    assert len(api_builds) == 2 and all(
        f"--tag {REPOSITORY_URI}:api-{SHA}" in c for c in api_builds
    )
    assert any(
        c.startswith(f"docker run --rm --entrypoint python {REPOSITORY_URI}:api-{SHA} -c")
        and "find_spec('torch')" in c
        for c in calls
    )
    digest = (build.tags / f"api-{SHA}").read_text()
    workdir = build.env_file.parent
    api_outputs = json.loads((workdir / "api-image.json").read_text())
    assert api_outputs["tag"] == f"api-{SHA}" and api_outputs["digest"] == digest
    assert (workdir / "api-image.env").read_text() == (
        f"API_IMAGE_URI={REPOSITORY_URI}@{digest}\nAPI_IMAGE_DIGEST={digest}\n"
    )
    assert build.outputs() == trainer_outputs
    unknown = build("build", IMAGE_KIND="gpu")
    allowed = "IMAGE_KIND=gpu; allowed: trainer, trainer-hf, api"
    assert unknown.returncode != 0 and allowed in unknown.stderr


def test_push_fails_when_the_pushed_image_is_not_the_self_tested_one(build):
    for name in ("login", "build", "selftest"):
        assert build(name).returncode == 0
    result = build("push", STAND_IN_PUSHED_CONFIG="sha256:" + "d" * 64)
    assert result.returncode == 1
    assert "is not the self-tested image's" in result.stderr
    assert not (build.env_file).exists()


def test_failed_self_test_stops_before_anything_is_pushed(build):
    assert build("build").returncode == 0
    assert build("selftest", STAND_IN_SELFTEST_EXIT="1").returncode == 1
    assert not pushes(build)


def test_commit_already_in_ecr_is_reused_not_rebuilt_or_overwritten(build):
    build.tags.mkdir(parents=True)
    (build.tags / SHA).write_text(OTHER_DIGEST)
    results = run_all(build)
    assert "already in ECR" in results[1].stdout
    assert not any(c.startswith(("docker buildx build", "docker run")) for c in build.calls())
    assert build.outputs()["digest"] == OTHER_DIGEST


def test_commit_pushed_by_a_concurrent_build_is_adopted_not_overwritten(build):
    for name in ("login", "build", "selftest"):
        assert build(name).returncode == 0
    (build.tags / SHA).write_text(OTHER_DIGEST)  # the other build of this commit pushed first
    result = build("push")
    assert result.returncode == 0, result.stderr
    assert "appeared in ECR during this build" in result.stdout
    assert not pushes(build)
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


@pytest.mark.parametrize(
    "env",
    [{"BUILD_KIND": "pull-request"}, {"CODEBUILD_WEBHOOK_EVENT": "PULL_REQUEST_UPDATED"}],
)
def test_pull_request_build_reads_the_cache_and_never_pushes_or_writes_it(build, env):
    run_all(build, **env)
    calls = build.calls()
    assert not pushes(build) and not any("--cache-to" in c for c in calls)
    assert any(f"--cache-from type=registry,ref={CACHE_URI}:buildcache" in c for c in calls)
    # It never even asks the release repository about tags.
    assert not any(c.startswith("aws ecr describe-images") for c in calls)
    assert build.outputs()["pushed"] is False
    assert not (build.tags / SHA).exists()


def test_nightly_rebuilds_from_scratch_under_a_tag_no_release_can_take(build):
    build.tags.mkdir(parents=True)
    (build.tags / SHA).write_text(OTHER_DIGEST)  # main's release of this commit exists
    run_all(build, BUILD_KIND="nightly", BUILD_DATE="20261123", GIT_TAG="v1.2.3")
    nightly = f"nightly-20261123-{SHA}"
    (push,) = pushes(build)
    assert f"--tag {REPOSITORY_URI}:{nightly}" in push and "--pull --no-cache" in push
    assert "--cache-to" not in push and "--cache-from" not in push
    assert (build.tags / SHA).read_text() == OTHER_DIGEST  # the release is untouched
    assert not (build.tags / "1.2.3").exists()  # a nightly never takes a version tag
    outputs = build.outputs()
    assert outputs["tag"] == nightly and outputs["kind"] == "nightly"
    assert outputs["digest"] == (build.tags / nightly).read_text()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GIT_TAG": "release-7"}, "git tag release-7 is not semver"),
        ({"CODEBUILD_RESOLVED_SOURCE_VERSION": "main"}, "main is not a full git SHA"),
        ({"REPOSITORY_URI": ""}, "REPOSITORY_URI is not set"),
        ({"BUILD_CACHE_REPOSITORY_URI": ""}, "BUILD_CACHE_REPOSITORY_URI is not set"),
        ({"BUILD_KIND": "fork"}, "BUILD_KIND=fork; allowed: release, nightly, pull-request"),
        ({"BUILD_KIND": "nightly", "BUILD_DATE": "today"}, "BUILD_DATE=today is not YYYYMMDD"),
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
