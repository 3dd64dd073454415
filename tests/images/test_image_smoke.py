"""The image self-test on this CPU machine: it passes here, and each mismatch it exists to catch
fails with a message that says what was expected and what was found."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from trainer import smoke

REPO = Path(__file__).resolve().parents[2]
# The build this machine's torch has: PyPI's torch is a CUDA build (it runs on the CPU), a
# CPU-only wheel has none. The tests expect what is here, or plant the other one.
LOCAL_BUILD = torch.version.cuda or "cpu"


@pytest.fixture(autouse=True)
def no_node_environment(monkeypatch):
    """Start every test from a plain CPU node: no EFA hints, no baked expectations."""
    for name in list(os.environ):
        if name.startswith("TRAINSTACK_SMOKE_") or name == "FI_PROVIDER":
            monkeypatch.delenv(name)


def run_smoke(capsys, *argv: str) -> tuple[int, str]:
    code = smoke.main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def fake_fi_info(directory: Path, exit_code: int, message: str) -> None:
    """A stand-in for libfabric's `fi_info` binary, which this machine does not have."""
    script = directory / "fi_info"
    script.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_module_passes_on_cpu_as_a_real_process():
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "trainer.smoke", "--expect-cuda", LOCAL_BUILD],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("TRAINSTACK_SMOKE_")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        f"ok   {name}" for name, _ in smoke.CHECKS
    ]
    assert "gloo all_reduce on cpu ok" in result.stdout
    assert lines[-1] == f"smoke test passed: {len(smoke.CHECKS)} checks"


def test_a_build_other_than_the_expected_one_fails(capsys):
    if LOCAL_BUILD == "cpu":
        code, out = run_smoke(capsys, "--expect-cuda", "13.0")
        expected = "FAIL versions: expected torch built for CUDA 13.0, found a CPU-only build"
    else:
        code, out = run_smoke(capsys, "--expect-cuda", "cpu")
        expected = (
            "FAIL versions: expected a CPU-only torch build, "
            f"found one built for CUDA {LOCAL_BUILD}"
        )
    assert code == smoke.EXIT_FAILED
    assert expected in out


def test_missing_gpu_fails_and_skips_the_device_checks(capsys):
    code, out = run_smoke(capsys, "--device", "cuda")
    assert code == smoke.EXIT_FAILED
    assert "FAIL device: expected CUDA but torch.cuda.is_available() is False" in out
    assert "skip train_step: the device check failed" in out
    assert "skip collective: the device check failed" in out


def test_expected_nccl_without_nccl_fails(capsys, monkeypatch):
    monkeypatch.setenv("TRAINSTACK_SMOKE_EXPECT_NCCL", "2.29.7")
    # A build without NCCL (a CPU-only wheel); PyPI's CUDA build here has one.
    monkeypatch.delattr(torch._C, "_nccl_version", raising=False)
    code, out = run_smoke(capsys)
    assert code == smoke.EXIT_FAILED
    assert "FAIL nccl: expected NCCL 2.29.7, but torch" in out


def test_efa_hint_without_libfabric_fails(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FI_PROVIDER", "efa")
    monkeypatch.setenv("PATH", str(tmp_path))  # no fi_info anywhere
    code, out = run_smoke(capsys)
    assert code == smoke.EXIT_FAILED
    assert "FAIL efa: EFA expected (FI_PROVIDER=efa) but fi_info is not installed" in out


def test_efa_provider_missing_fails_with_fi_info_output(capsys, monkeypatch, tmp_path):
    fake_fi_info(tmp_path, 61, "fi_getinfo: -61 (No data available)")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    code, out = run_smoke(capsys, "--efa", "require")
    assert code == smoke.EXIT_FAILED
    assert "`fi_info -p efa` failed: fi_getinfo: -61 (No data available)" in out


def test_efa_without_the_nccl_plugin_fails_and_with_it_passes(capsys, monkeypatch, tmp_path):
    fake_fi_info(tmp_path, 0, "provider: efa")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    code, out = run_smoke(capsys, "--efa", "require")
    assert code == smoke.EXIT_FAILED
    assert f"the aws-ofi-nccl plugin {smoke.OFI_NCCL_PLUGIN} is not on LD_LIBRARY_PATH" in out

    (tmp_path / smoke.OFI_NCCL_PLUGIN).write_bytes(b"")
    monkeypatch.setattr(smoke, "locked_memory_limit", lambda: smoke_unlimited())
    code, out = run_smoke(capsys, "--efa", "require")
    assert code == 0, out
    assert f"NCCL plugin {tmp_path / smoke.OFI_NCCL_PLUGIN}" in out


def smoke_unlimited() -> int:
    import resource

    return resource.RLIM_INFINITY


def test_bad_option_from_the_environment_names_the_variable(capsys, monkeypatch):
    monkeypatch.setenv("TRAINSTACK_SMOKE_DEVICE", "gpu")
    with pytest.raises(SystemExit) as exited:
        smoke.main([])
    assert exited.value.code == 2
    assert "TRAINSTACK_SMOKE_DEVICE='gpu': allowed: auto, cpu, cuda" in capsys.readouterr().err


def test_trainer_dependency_missing_from_the_image_fails(capsys, monkeypatch):
    # As in an image whose lock lacks omegaconf: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "omegaconf", None)
    for name in [n for n in sys.modules if n.startswith("trainer.") and n != "trainer.smoke"]:
        monkeypatch.delitem(sys.modules, name)
    code, out = run_smoke(capsys)
    assert code == smoke.EXIT_FAILED
    assert "FAIL trainer_imports: trainer modules fail to import: " in out
    assert "import of omegaconf halted" in out


READ_ONLY_ROOT = (
    # A private mount namespace: the root filesystem read-only, as `readOnlyRootFilesystem`
    # makes it, and a fresh tmpfs at each emptyDir mount path the rendered pod has. The image's
    # own files (this clone, its venv: $KEEP) stay where they are, read-only, also where a mount
    # path covers them (a clone under /tmp): each is opened first (fds 3..9, in this namespace)
    # and bound back from its descriptor (-c: mount must not resolve the path, now the tmpfs's).
    # A mount path under another's tmpfs (a clone's folder under /tmp) is made first, as the
    # kubelet makes a mount point; any step that fails ends the shell with its message.
    "mount --bind / / && mount -o remount,ro,bind / && "
    'i=3; for k in $KEEP; do eval "exec $i<\\"\\$k\\""; i=$((i+1)); done; '
    'for dir in $MOUNTS; do mkdir -p "$dir" && mount -t tmpfs -o size=256m tmpfs "$dir" || '
    "exit 1; done && "
    'i=3; for k in $KEEP; do mkdir -p "$k" && mount -c --bind "/proc/self/fd/$i" "$k" && '
    'mount -c -o remount,ro,bind "$k" || exit 1; i=$((i+1)); done && exec "$@"'
)


def covered(mounts: list[str], clone: Path = REPO) -> list[str]:
    """The directories of this interpreter and clone that a mount path would hide, topmost."""
    mine = {clone, Path(sys.prefix), Path(sys.base_prefix)}
    mine |= {Path(p) for p in sys.path if p and Path(p).is_dir()}
    hidden = sorted(
        {p.resolve() for p in mine if any(p.resolve().is_relative_to(m) for m in mounts)}
    )
    return [p for p in map(str, hidden) if not any(p.startswith(f"{q}/") for q in hidden)]


def rendered_trainer_pod() -> tuple[dict[str, str], list[str]]:
    """The env and emptyDir mount paths of a rendered training pod's container."""
    from tests.jobs.conftest import CLUSTER, build

    job = next(
        m
        for m in build([*CLUSTER, "compute=g5.12xlarge", "job.api=pytorchjob"]).manifests
        if m["kind"] == "PyTorchJob"
    )
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounts = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty_dirs]
    # The node's side (EFA, NCCL) is not this machine's: keep the rest of the pod's env.
    env = {
        e["name"]: e["value"]
        for e in container["env"]
        if "value" in e and not e["name"].startswith(("FI_", "NCCL_", "TORCH_NCCL_"))
    }
    return env, [m for m in mounts if m != "/dev/shm"]  # /dev/shm: tmpfs here already


def smoke_under_read_only_root(env: dict[str, str], mounts: list[str], clone: Path = REPO):
    """The self-test of `clone`'s trainer (this one's by default) in the pod's filesystem."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINSTACK_SMOKE_")}
    if clone != REPO:
        base["PYTHONPATH"] = str(clone)
    import torch

    # This machine's build, whichever it is (pip's torch is the CUDA one): the mounts are
    # what is tested here.
    built = torch.version.cuda or "cpu"
    command = [sys.executable, "-W", "ignore", "-m", "trainer.smoke", "--expect-cuda", built]
    namespace = ["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_ROOT]
    keep = covered(mounts, clone)
    assert len(keep) <= 7, keep  # fds 3..9
    return subprocess.run(
        [*namespace, "sh", *command],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=180,
        env={**base, **env, "MOUNTS": " ".join(mounts), "KEEP": " ".join(keep)},
    )


def skip_without_mount_namespaces() -> None:
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount --bind / /"],
        capture_output=True,
        check=False,
    )
    if probe.returncode:
        pytest.skip(f"no mount namespaces here (unshare: {probe.stderr.decode().strip()})")


def test_self_test_passes_with_the_pods_read_only_root_and_fails_without_its_mounts():
    skip_without_mount_namespaces()
    env, mounts = rendered_trainer_pod()
    assert mounts == ["/tmp"] and env["HOME"].startswith("/tmp/")
    result = smoke_under_read_only_root(env, mounts)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok   writable_dirs" in result.stdout
    # A clone (and venv) where an emptyDir is mounted, as one under /tmp is: the same result.
    result = smoke_under_read_only_root(env, [*mounts, str(REPO.parent)])
    assert result.returncode == 0, result.stdout + result.stderr
    # The same image without the pod's HOME: the caches under the image's HOME are read-only.
    home = str(Path.home())
    result = smoke_under_read_only_root({**env, "HOME": home}, mounts)
    assert result.returncode == smoke.EXIT_FAILED
    assert f"{home}/" in result.stdout and "is not writable" in result.stdout, result.stdout


def test_the_self_test_runs_from_a_clone_nested_under_tmp():
    """A clone two folders below /tmp (`/tmp/<dir>/<clone>`, issue 50): the pod's emptyDir at
    /tmp hides it, and an emptyDir at the clone's parent (made on that tmpfs first) too; its
    own files (here the packages the self-test runs: trainer, contract, catalog) stay."""
    skip_without_mount_namespaces()
    under_tmp = Path(tempfile.mkdtemp(prefix="trainstack-clone-", dir="/tmp"))
    try:
        clone = under_tmp / "work" / "trainstack"
        for package in ("trainer", "contract", "catalog"):
            shutil.copytree(
                REPO / package, clone / package, ignore=shutil.ignore_patterns("__pycache__")
            )
        env, mounts = rendered_trainer_pod()
        for where in (mounts, [*mounts, str(clone.parent)]):
            result = smoke_under_read_only_root(env, where, clone)
            assert result.returncode == 0, (where, result.stdout + result.stderr)
            assert "ok   writable_dirs" in result.stdout
    finally:
        shutil.rmtree(under_tmp, ignore_errors=True)
