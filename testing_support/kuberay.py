"""KubeRay's own RayJob validation, compiled from the pinned ray-operator module
(localcluster.versions.KUBERAY, the version Kueue 0.19.2 requires): the tests run a rendered
RayJob through the checks KubeRay's controller makes before it creates the Ray cluster
(testing_support/kuberay_validate/main.go), not only through its CRD schema.

Built once per version into the local cluster's build cache
(`<cache>/kuberay-validate-<version>/kuberay-validate`), from a go.mod of our own that requires
the module and takes its go.sum (so its dependencies are the ones the release chose).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from localcluster.build import GO, _go_env, cache_root, module_dir
from localcluster.versions import KUBERAY

SOURCE = Path(__file__).parent / "kuberay_validate" / "main.go"


def validator() -> Path:
    """The validator binary, built if missing (about a minute with the Go caches warm)."""
    home = cache_root() / f"kuberay-validate-{KUBERAY.version}"
    binary = home / "kuberay-validate"
    if binary.is_file() and binary.stat().st_mtime >= SOURCE.stat().st_mtime:
        return binary
    module = module_dir(KUBERAY)
    src = home / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    their_mod = (module / "go.mod").read_text()
    own_mod = their_mod.replace(f"module {KUBERAY.module}", "module trainstack.local/validate", 1)
    own_mod += f"\nrequire {KUBERAY.module} {KUBERAY.version}\n"
    (src / "go.mod").write_text(own_mod)
    (src / "go.sum").write_text((module / "go.sum").read_text())
    shutil.copy(SOURCE, src / "main.go")
    env = _go_env() | {"GOFLAGS": f"{_go_env().get('GOFLAGS', '')} -mod=mod".strip()}
    done = subprocess.run(
        [GO, "build", "-o", str(binary), "."],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"building KubeRay's validator failed:\n{done.stderr[-3000:]}")
    return binary


def kuberay_refusal(job: dict, workdir: Path) -> str | None:
    """KubeRay's refusal of RayJob `job` (one line), or None when it accepts it."""
    path = workdir / f"{job['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    done = subprocess.run(
        [str(validator()), str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode == 0 and done.stdout.strip() == "ok":
        return None
    return (done.stdout + done.stderr).strip() or f"exit {done.returncode}"
