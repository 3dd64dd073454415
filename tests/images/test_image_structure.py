"""Static checks of what only CodeBuild and a Docker engine can run: the buildspec's order, the
Dockerfile's pins and the build context."""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "images/trainer/Dockerfile").read_text()


def load_lock():
    spec = importlib.util.spec_from_file_location("image_lock", REPO / "images/trainer/lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- buildspec -------------------------------------------------------------------------------


def test_buildspec_logs_in_builds_self_tests_then_pushes_and_exports_the_digest():
    spec = yaml.safe_load((REPO / "images/buildspec.yml").read_text())
    assert spec["version"] == 0.2
    phases = spec["phases"]
    assert list(phases) == ["pre_build", "build", "post_build"]
    assert phases["pre_build"]["commands"] == ["images/build.sh login"]
    assert phases["build"]["commands"] == [
        "images/build.sh build",
        "images/build.sh selftest",
        "images/build.sh push",
        # runner=hf's variant of the trainer image: the same steps, hf-* tags.
        "IMAGE_KIND=trainer-hf images/build.sh build",
        "IMAGE_KIND=trainer-hf images/build.sh selftest",
        "IMAGE_KIND=trainer-hf images/build.sh push",
        # The Training API image: the same steps after the trainer's (images/api).
        "IMAGE_KIND=api images/build.sh build",
        "IMAGE_KIND=api images/build.sh selftest",
        "IMAGE_KIND=api images/build.sh push",
    ]
    # post_build runs even after a failed build: it may only export, never push.
    assert phases["pre_build"]["on-failure"] == phases["build"]["on-failure"] == "ABORT"
    assert "build.sh" not in " ".join(phases["post_build"]["commands"])
    assert "CODEBUILD_BUILD_SUCCEEDING" in phases["post_build"]["commands"][0]
    exported = {"IMAGE_URI", "IMAGE_DIGEST", "API_IMAGE_URI", "API_IMAGE_DIGEST"}
    exported |= {"HF_IMAGE_URI", "HF_IMAGE_DIGEST"}
    assert set(spec["env"]["exported-variables"]) == exported
    assert spec["artifacts"]["files"] == ["image.json", "hf-image.json", "api-image.json"]


# ---- workflows: tests/images/test_workflows.py ------------------------------------------------


# ---- Dockerfile, build context, pins ---------------------------------------------------------


def test_dockerfile_pins_base_efa_and_runs_as_non_root():
    base = re.search(r"ARG CUDA_BASE_IMAGE=(\S+)", DOCKERFILE)[1]
    # A tag for people, a digest for the engine (test_image_supply_chain checks the lock).
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-base-ubuntu\d+\.\d+@sha256:[0-9a-f]{64}", base)
    assert len(re.findall(r"^FROM ", DOCKERFILE, re.M)) >= 3
    efa = tuple(
        int(p) for p in re.search(r"EFA_INSTALLER_VERSION=([\d.]+)", DOCKERFILE)[1].split(".")
    )
    assert efa >= (1, 49, 0)
    assert "--skip-kmod --skip-limit-conf --no-verify" in DOCKERFILE
    final_stage = DOCKERFILE.rsplit("\nFROM ", 1)[1]
    user = re.findall(r"^USER (\S+)", final_stage, re.M)[-1]
    assert re.fullmatch(r"[1-9]\d+:[1-9]\d+", user)
    assert 'org.opencontainers.image.revision="${GIT_SHA}"' in final_stage
    assert 'org.opencontainers.image.source="${SOURCE_URL}"' in final_stage
    # The pods' `command: [torchrun, ...]` must run as given: an exec-style pass-through only.
    assert re.findall(r"^ENTRYPOINT (.+)$", final_stage, re.M) == ['["/usr/bin/tini", "--"]']
    assert not re.search(r"^(ARG|ENV)\s+\S*(TOKEN|SECRET|PASSWORD|CREDENTIAL)", DOCKERFILE, re.M)


def test_cuda_of_base_image_torch_wheel_and_self_test_agree():
    pins = load_lock().parse_pins((REPO / "images/trainer/constraints.txt").read_text())
    base_cuda = re.search(r"nvidia/cuda:(\d+\.\d+)\.", DOCKERFILE)[1]
    expected = re.search(r"TRAINSTACK_SMOKE_EXPECT_CUDA=(\S+)", DOCKERFILE)[1]
    assert expected == base_cuda == ".".join(pins["cuda-toolkit"].split(".")[:2])
    major = base_cuda.split(".")[0]
    assert f"nvidia-nccl-cu{major}" in pins  # the NCCL torch loads, checked by the self-test


def test_image_lock_pins_every_trainer_dependency_at_the_developer_versions():
    lock = load_lock()
    pins = {}
    for name in ("constraints.txt", "build-tools.txt"):
        text = (REPO / "images/trainer" / name).read_text()
        versions, hashes = lock.parse_pins(text), lock.parse_hashes(text)
        locked = {k: (v, hashes[k][0].removeprefix("sha256:")) for k, v in versions.items()}
        assert text == lock.render(locked), f"edit {name} via images/trainer/lock.py"
        pins.update({lock.normalize(k): v for k, v in versions.items()})
    assert pins["torch"] == lock.TORCH_VERSION
    for requirement in lock.top_level_requirements():
        name, _, version = requirement.partition("==")
        name = name.split("[")[0]  # s3torchconnector[dcp]: the package, its extras resolved
        assert lock.normalize(name) in pins, f"{name} is not in the image lock"
        if version:
            assert pins[lock.normalize(name)] == version, name


def build_context(ignore_file: str = ".dockerignore") -> set[str]:
    """Tracked files Docker would send, by the ignore file's rules (last matching line wins)."""
    rules = []
    for line in (REPO / ignore_file).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!").rstrip("/")))
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    included = set()
    for path in files:
        keep = True
        for negated, pattern in rules:
            bare = pattern.removeprefix("**/")
            parts = path.split("/")
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            if pattern.startswith("**/"):
                hit = any(fnmatch.fnmatch(p, bare) for p in parts)
            else:
                hit = any(fnmatch.fnmatch(p, pattern) for p in prefixes)
            if hit:
                keep = negated
        if keep:
            included.add(path)
    return included


def test_build_context_holds_only_what_the_image_copies():
    context = build_context()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.M)
    sources = {src for line in copied for src in line.split() if not src.startswith("--")}
    for source in sources:
        assert any(f == source or f.startswith(source + "/") for f in context), source
    for path in context:
        assert any(path == s or path.startswith(s + "/") for s in sources), path
    assert not any(p.startswith((".git/", ".venv/", "tests/", "jobs/", "infra/")) for p in context)


def test_the_api_image_context_holds_what_its_dockerfile_copies():
    """The API image is built from the repository root (images/build.sh: `--file
    images/api/Dockerfile .`): BuildKit reads images/api/Dockerfile.dockerignore for it, not
    the root .dockerignore, which leaves out jobs/ and the API's locks. Every COPY source is in
    that context, and nothing else is."""
    context = build_context("images/api/Dockerfile.dockerignore")
    dockerfile = (REPO / "images/api/Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M)
    sources = {src for line in copied for src in line.split() if not src.startswith("--")}
    assert {"jobs", "conf", "contract", "hydra_plugins"} <= sources
    for source in sources:
        assert any(f == source or f.startswith(source + "/") for f in context), source
    for path in context:
        assert any(path == s or path.startswith(s + "/") for s in sources), path
    assert not any(p.startswith((".git/", ".venv/", "tests/", "infra/")) for p in context)


def test_the_hf_variant_lock_adds_runner_hf_packages_and_moves_no_base_pin():
    lock = load_lock()
    base_text = "".join(
        (REPO / "images/trainer" / n).read_text() for n in ("constraints.txt", "build-tools.txt")
    )
    base = {lock.normalize(k): v for k, v in lock.parse_pins(base_text).items()}
    text = (REPO / "images/trainer/constraints-hf.txt").read_text()
    versions, hashes = lock.parse_pins(text), lock.parse_hashes(text)
    locked = {k: (v, hashes[k][0].removeprefix("sha256:")) for k, v in versions.items()}
    assert text == lock.render(locked, lock.HF_HEADER), "edit it via images/trainer/lock.py"
    added = {lock.normalize(k): v for k, v in versions.items()}
    assert not set(added) & set(base)  # the variant adds, never replaces
    for requirement in lock.hf_runner_requirements():
        name, _, version = requirement.partition("==")
        assert added[lock.normalize(name)] == version, name
    # The default image never installs them: only the variant's Dockerfile reads that lock,
    # hash-checked, on top of the trainer image, ending as the trainer's user.
    assert "constraints-hf.txt" not in DOCKERFILE
    variant = (REPO / "images/trainer-hf/Dockerfile").read_text()
    assert "--require-hashes --no-deps" in variant and "constraints-hf.txt" in variant
    assert re.findall(r"^USER (\S+)", variant, re.M)[-1] == "10001:10001"
    ignore = (REPO / "images/trainer-hf/Dockerfile.dockerignore").read_text().split()
    assert ignore[-2:] == ["*", "!images/trainer/constraints-hf.txt"]
