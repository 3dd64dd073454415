"""What goes into the trainer image and how it is layered: the lock resolves for the image's
platform and Python whatever machine runs it (run for real by pip, offline, against fixture
wheels), every file is hash-checked, base images are pinned by digest, and the trainer's code
is a small last layer apart from the multi-GB dependency layer."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import re
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE_DIR = REPO / "images/trainer"
DOCKERFILE = (IMAGE_DIR / "Dockerfile").read_text()
UBUNTU_PYTHON = {"22.04": "3.10", "24.04": "3.12", "26.04": "3.14"}
"""The python3 each Ubuntu LTS ships (what `apt-get install python3` gives the image)."""


def load_lock():
    spec = importlib.util.spec_from_file_location("image_lock", IMAGE_DIR / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = load_lock()


def stages(text: str = DOCKERFILE) -> dict[str, str]:
    """Stage name -> its instructions (continuation lines joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    parts = re.split(r"^FROM \S+ AS (\S+)\n", joined, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


# ---- the lock --------------------------------------------------------------------------------


def wheel(directory: Path, filename: str, requires: tuple[str, ...] = ()) -> str:
    """Write a minimal valid wheel; return its sha256."""
    name, version = filename.split("-")[:2]
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "")
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        archive.writestr(f"{info}/RECORD", "")
    (directory / filename).write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def test_lock_resolves_for_the_image_not_this_machine(tmp_path):
    """pip runs for real, offline (--no-index) against fixture wheels for several platforms:
    it must pick the linux x86_64 CPython 3.12 file, whatever Python runs this test."""
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    image = "cp" + lock.IMAGE_PYTHON.replace(".", "")
    wanted = wheel(tmp_path, f"alpha-1.0-{image}-{image}-manylinux_2_28_x86_64.whl", ("beta",))
    if here != image:
        wheel(tmp_path, f"alpha-1.0-{here}-{here}-manylinux_2_28_x86_64.whl", ("beta",))
    wheel(tmp_path, f"alpha-1.0-{image}-{image}-macosx_11_0_arm64.whl", ("beta",))
    wheel(tmp_path, f"alpha-1.0-{image}-{image}-manylinux_2_28_aarch64.whl", ("beta",))
    # A glibc newer than Ubuntu 24.04's: would not load in the image.
    wheel(tmp_path, f"alpha-1.0-{image}-{image}-manylinux_2_41_x86_64.whl", ("beta",))
    beta = wheel(tmp_path, "beta-2.0-py3-none-any.whl")
    locked = lock.resolve(
        ["alpha==1.0"], index_args=("--no-index", "--find-links", str(tmp_path)), sdist_only=()
    )
    assert locked == {"alpha": ("1.0", wanted), "beta": ("2.0", beta)}


def test_lock_asks_pip_for_the_images_platform_python_and_wheels_only():
    flags = lock.resolver_flags()
    pairs = dict(zip(flags[::2], flags[1::2], strict=False))
    assert pairs["--python-version"] == lock.IMAGE_PYTHON
    assert pairs["--implementation"] == "cp"
    assert "--only-binary=:all:" in flags
    platforms = [flags[i + 1] for i, f in enumerate(flags) if f == "--platform"]
    assert platforms[0] == "manylinux_2_39_x86_64" and "manylinux_2_17_x86_64" in platforms
    assert all(p.endswith("x86_64") for p in platforms)
    ubuntu = re.search(r"nvidia/cuda:[\d.]+-base-ubuntu([\d.]+)@", DOCKERFILE)[1]
    assert UBUNTU_PYTHON[ubuntu] == lock.IMAGE_PYTHON


def test_every_locked_requirement_carries_a_hash_and_nothing_floats():
    for name in ("constraints.txt", "build-tools.txt"):
        text = (IMAGE_DIR / name).read_text()
        pins, hashes = lock.parse_pins(text), lock.parse_hashes(text)
        assert pins and set(pins) == set(hashes), name
        for package, version in pins.items():
            assert re.fullmatch(r"[\w.+!]+", version), (name, package)
            assert len(hashes[package]) == 1, (name, package)
    tools = lock.parse_pins((IMAGE_DIR / "build-tools.txt").read_text())
    assert {lock.normalize(n) for n in tools} == set(lock.BUILD_TOOLS)


def test_dockerfile_installs_only_hash_checked_locked_files():
    installs = re.findall(r"pip install[^&]*", re.sub(r"\\\n\s*", " ", DOCKERFILE))
    locked = [i for i in installs if " -r " in i]
    assert len(locked) == 2
    for command in locked:
        assert "--require-hashes" in command and "--no-deps" in command, command
    # The one other install is the trainer's own wheel, built from this commit's source.
    (trainer,) = [i for i in installs if " -r " not in i]
    assert "--no-index" in trainer and "--no-deps" in trainer and "/tmp/wheels/" in trainer
    env_stage = stages()["python-env"]
    assert env_stage.index("-r /tmp/lock/build-tools.txt") < env_stage.index(
        "-r /tmp/lock/constraints.txt"
    )


# ---- base images -----------------------------------------------------------------------------


def test_every_base_image_is_pinned_by_digest_with_its_tag_said():
    syntax = DOCKERFILE.splitlines()[0]
    assert re.fullmatch(r"# syntax=docker/dockerfile:[\d.]+@sha256:[0-9a-f]{64}", syntax)
    for image in re.findall(r"^FROM (\S+)", DOCKERFILE, re.M):
        assert image == "${CUDA_BASE_IMAGE}" or image == "python-env", image
    (base,) = re.findall(r"^ARG CUDA_BASE_IMAGE=(\S+)$", DOCKERFILE, re.M)
    match = lock.PINNED_REFERENCE.fullmatch(base)
    assert match, base
    assert f"Base image: {match['image']}:{match['tag']}." in DOCKERFILE  # the tag, in words


def test_lock_moves_every_digest_to_what_its_tag_points_at_now():
    asked = []

    def registry(image: str, tag: str) -> str:
        asked.append(f"{image}:{tag}")
        return "sha256:" + hashlib.sha256(image.encode()).hexdigest()

    updated = lock.repin_base_images(DOCKERFILE, registry)
    assert sorted(asked) == sorted(
        [f"{m['image']}:{m['tag']}" for m in lock.PINNED_REFERENCE.finditer(DOCKERFILE)]
    )
    assert len(asked) == 2  # the CUDA base and the dockerfile frontend
    cuda = re.search(r"^ARG CUDA_BASE_IMAGE=\S+@(\S+)$", updated, re.M)[1]
    assert cuda == "sha256:" + hashlib.sha256(b"nvidia/cuda").hexdigest()
    assert updated.replace(cuda, "") != DOCKERFILE.replace(cuda, "")  # digests, not tags, moved


def test_registry_lookup_reads_the_digest_header():
    class Answer(io.BytesIO):
        def __init__(self, body: bytes = b"", headers: dict | None = None):
            super().__init__(body)
            self.headers = headers or {}

    requests = []

    def opener(request):
        requests.append(request)
        if isinstance(request, str):
            return Answer(b'{"token": "t"}')
        return Answer(headers={"Docker-Content-Digest": "sha256:" + "e" * 64})

    digest = lock.docker_hub_digest("nvidia/cuda", "13.0.2-base-ubuntu24.04", opener)
    assert digest == "sha256:" + "e" * 64
    manifest = requests[1]
    assert manifest.get_method() == "HEAD"
    assert manifest.full_url.endswith("/v2/nvidia/cuda/manifests/13.0.2-base-ubuntu24.04")
    assert "image.index.v1+json" in manifest.headers["Accept"]


# ---- layers ----------------------------------------------------------------------------------


def test_trainer_code_is_a_small_last_layer_apart_from_the_dependencies():
    """A change to trainer/ alone must not touch the dependency layer: only the trainer-wheel
    stage sees trainer/, and the runtime installs that wheel after copying the venv."""
    by_stage = stages()
    assert list(by_stage) == ["efa-installer", "python-env", "trainer-wheel", "trainer"]
    for name, body in by_stage.items():
        sources = [
            src
            for line in re.findall(r"^COPY (?!--from)(.+) \S+$", body, re.M)
            for src in line.split()
            if not src.startswith("--")
        ]
        copies_trainer = any(s == "trainer" or s.startswith("trainer/") for s in sources)
        assert copies_trainer == (name == "trainer-wheel"), name
    assert (
        "COPY images/trainer/build-tools.txt images/trainer/constraints.txt"
        in (by_stage["python-env"])
    )
    runtime = by_stage["trainer"].splitlines()
    venv = runtime.index("COPY --from=python-env /opt/venv /opt/venv")
    wheel_install = next(i for i, line in enumerate(runtime) if "from=trainer-wheel" in line)
    assert venv < wheel_install
    later = [line.split()[0] for line in runtime[wheel_install + 1 :] if line and line[0] != "#"]
    assert set(later) <= {"ENV", "WORKDIR", "USER", "HEALTHCHECK", "ENTRYPOINT", "CMD"}, later


def test_nightly_rebuilds_pick_up_apt_fixes_of_the_base_packages():
    assert "apt-get upgrade -y" in stages()["trainer"]


@pytest.mark.parametrize("name", ["constraints.txt", "build-tools.txt"])
def test_lock_files_are_in_the_build_context(name):
    assert f"!images/trainer/{name}" in (REPO / ".dockerignore").read_text()


# ---- the Training API image ------------------------------------------------------------------

API_DIR = REPO / "images/api"


def pins_of(path: Path) -> dict[str, str]:
    """Normalized name -> version of a requirements file's pins."""
    return {lock.normalize(n): v for n, v in lock.parse_pins(path.read_text()).items()}


API_DOCKERFILE = (API_DIR / "Dockerfile").read_text()


def test_api_image_base_is_the_trainers_pinned_base_and_its_locks_are_hashed():
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", API_DOCKERFILE, re.M)
    assert lock.PINNED_REFERENCE.fullmatch(base), base
    assert re.findall(r"^ARG CUDA_BASE_IMAGE=(\S+)$", DOCKERFILE, re.M) == [base]
    assert re.findall(r"^FROM (\S+)", API_DOCKERFILE, re.M) == ["${BASE_IMAGE}"]
    assert API_DOCKERFILE.splitlines()[0] == DOCKERFILE.splitlines()[0]  # the syntax pin
    for name in ("constraints.txt", "build-tools.txt"):
        text = (API_DIR / name).read_text()
        pins, hashes = lock.parse_pins(text), lock.parse_hashes(text)
        assert pins and set(pins) == set(hashes), name
        assert all(len(h) == 1 for h in hashes.values()), name
        assert "torch" not in {lock.normalize(n) for n in pins}
    # Same libraries as developer machines (constraints.txt) wherever both pin them.
    dev, api = pins_of(REPO / "constraints.txt"), pins_of(API_DIR / "constraints.txt")
    assert {n: v for n, v in api.items() if n in dev and dev[n] != v} == {}
    installs = re.findall(r"pip install[^&]*", re.sub(r"\\\n\s*", " ", API_DOCKERFILE))
    locked = [i for i in installs if " -r " in i]
    assert [i.split(" -r ")[1].split()[0] for i in locked] == [
        "/tmp/lock/build-tools.txt",
        "/tmp/lock/constraints.txt",
    ]
    for command in installs:
        assert "--no-deps" in command, command
        assert " -r " not in command or "--require-hashes" in command, command
    (project,) = [i for i in installs if " -r " not in i]
    assert project.rstrip().endswith("-e .")


def test_the_trainer_image_carries_wandb_at_the_developer_pin():
    """`trainer.metrics.wandb_project` on a cluster run logs instead of warning that wandb is
    missing: the image's lock has it, at the version developer machines run."""
    image, dev = pins_of(IMAGE_DIR / "constraints.txt"), pins_of(REPO / "constraints.txt")
    assert image["wandb"] == dev["wandb"]
    assert "wandb" in lock.IMAGE_EXTRAS
