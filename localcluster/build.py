"""Build the local cluster's components from their Go modules into a cache outside the
repository (`~/.cache/trainstack/kube/<name>-<version>/bin`), once per version.

Each module comes through the Go module proxy at exactly its pin (`go mod download`, checked
against the checksum database). A module whose go.mod has no `replace` lines to local folders is
built inside its own folder of the module cache, with its own go.mod and go.sum, so its
dependencies are the ones its release chose. k8s.io/kubernetes and etcd's server replace their
sibling modules with folders their zips do not carry: those are built from a go.mod written here,
which replaces the staging modules with their published versions (k8s.io/api v0.35.4 for
Kubernetes v1.35.4 ...); the Pulumi CLI's (pkg/v3) likewise, repeating the replaces of its
go.mod that name a published module. The Kubernetes provider is built inside a writable copy of
its module, its relative replace dropped and its `go generate` run (its main package embeds the
versioned schema that generate.go writes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from localcluster.versions import COMPONENTS, KUBERNETES, Component

GO = os.environ.get("GO", shutil.which("go") or "/usr/local/go/bin/go")


def cache_root() -> Path:
    """`$TRAINSTACK_KUBE_CACHE`, else `$XDG_CACHE_HOME/trainstack/kube` (~/.cache/...)."""
    explicit = os.environ.get("TRAINSTACK_KUBE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainstack" / "kube"


def bin_dir(component: Component) -> Path:
    return cache_root() / component.key / "bin"


def binary(component: Component, name: str) -> Path:
    return bin_dir(component) / name


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # The pinned modules all declare a Go this toolchain satisfies; never fetch another one.
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    # Two packages compiled at a time keeps a 2-core, shared machine usable during the build.
    flags = env.get("GOFLAGS", "")
    if "-p=" not in flags:
        env["GOFLAGS"] = f"{flags} -p={os.environ.get('TRAINSTACK_GO_JOBS', '2')}".strip()
    return env


def _go(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            [GO, *args],
            cwd=cwd,
            env={**_go_env(), **(env or {})},
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise SystemExit(
            f"localcluster: Go not found ({GO}); install Go 1.26 or set GO=/path/to/go"
        ) from None
    if done.returncode != 0:
        raise SystemExit(f"localcluster: go {' '.join(args)} failed:\n{done.stderr.strip()}")
    return done.stdout


def module_dir(component: Component) -> Path:
    """The module's folder in the Go module cache (downloaded at its pin if missing)."""
    return Path(_download(component)["Dir"])


def _download(component: Component) -> dict:
    """`go mod download -json`: on failure it exits non-zero and says why in the JSON."""
    wanted = f"{component.module}@{component.version}"
    done = subprocess.run(
        [GO, "mod", "download", "-json", wanted],
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        info = json.loads(done.stdout)
    except json.JSONDecodeError:
        info = {"Error": done.stderr.strip() or "no answer"}
    if done.returncode or info.get("Error"):
        raise SystemExit(
            f"localcluster: {wanted} could not be downloaded: {info.get('Error')}\n"
            f"(the pin is infra/settings/versions.py's; TRAINSTACK_KUBE_OVERRIDE_"
            f"{component.name.upper().replace('-', '_')}=<version> tries another)"
        )
    return info


def _staging_replaces(kubernetes_go_mod: str, version: str) -> list[str]:
    """k8s.io/kubernetes's `k8s.io/x => ./staging/src/k8s.io/x` lines, each turned into the
    published module at the matching v0 version (v1.35.4 -> v0.35.4)."""
    staging_version = "v0." + version.removeprefix("v").split(".", 1)[1]
    names = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", kubernetes_go_mod, re.M)
    if not names:
        raise SystemExit("localcluster: k8s.io/kubernetes's go.mod has no staging replaces")
    return [f"\t{name} => {name} {staging_version}" for name in names]


def _replaces(go_mod: Path) -> tuple[list[str], list[str]]:
    """A go.mod's replace lines, split: those naming a published module (`old => new version`,
    kept by a build from outside the module, where its own go.mod's replaces do not apply) and
    the module paths replaced by a local folder (which the module's zip does not carry)."""
    parsed = json.loads(_go(["mod", "edit", "-json", str(go_mod)]))
    published, local = [], []
    for entry in parsed.get("Replace") or []:
        old, new = entry["Old"], entry["New"]
        if new.get("Version"):
            pinned = f" {old['Version']}" if old.get("Version") else ""
            published.append(f"\t{old['Path']}{pinned} => {new['Path']} {new['Version']}")
        else:
            local.append(old["Path"])
    return published, local


def _go_directive(go_mod: Path) -> str:
    """The module's `go` line: a go.mod requiring it must say at least as much."""
    return json.loads(_go(["mod", "edit", "-json", str(go_mod)])).get("Go") or "1.25.0"


def _own_module(component: Component, info: dict) -> Path:
    """A go.mod of our own requiring the component, ready to build its commands from."""
    src = cache_root() / component.key / "src"
    src.mkdir(parents=True, exist_ok=True)
    their_mod = Path(info["GoMod"])
    lines = [
        "// Written by localcluster/build.py: builds the pinned module's commands.",
        "module trainstack.local/build",
        "",
        f"go {max(_go_directive(their_mod), '1.25.0', key=_go_version_key)}",
        "",
        f"require {component.module} {component.version}",
    ]
    if component is KUBERNETES:
        replaces = _staging_replaces(their_mod.read_text(), component.version)
    else:
        replaces = _replaces(their_mod)[0]
    if replaces:
        lines += ["", "replace (", *replaces, ")"]
    (src / "go.mod").write_text("\n".join(lines) + "\n")
    packages = [_package(component, path) for path in component.commands.values()]
    _go(["get", *[f"{p}@{component.version}" for p in packages]], cwd=src)
    return src


def _go_version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _copied_module(component: Component, info: dict) -> Path:
    """A writable copy of the module: its replaces to local folders dropped (the versions its
    go.mod requires are fetched instead, with their checksums) and each command's
    `go generate` run with VERSION set (what the module's Makefile gives generate.go)."""
    src = cache_root() / component.key / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(info["Dir"], src)
    for path in [src, *src.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    _published, local = _replaces(src / "go.mod")
    if local:
        _go(["mod", "edit", *[f"-dropreplace={path}" for path in local]], cwd=src)
        _go(["mod", "download", *local], cwd=src)
    version = {"VERSION": component.version.removeprefix("v")}
    for path in component.commands.values():
        _go(["generate", f"./{path}"], cwd=src, env=version)
    return src


def _package(component: Component, path: str) -> str:
    return component.module if path == "." else f"{component.module}/{path}"


def _ldflags(component: Component) -> str:
    flags = ["-s", "-w"]
    if component.stamp:
        flags.append(f"-X {component.stamp}")
    if component is KUBERNETES:
        # What `kubectl version` and clients' discovery read; unset, it says v0.0.0-master.
        major, minor = component.version.removeprefix("v").split(".")[:2]
        base = "k8s.io/component-base/version"
        flags += [
            f"-X {base}.gitVersion={component.version}",
            f"-X {base}.gitMajor={major}",
            f"-X {base}.gitMinor={minor}",
            f"-X {base}.gitTreeState=clean",
        ]
    return " ".join(flags)


def is_built(component: Component) -> bool:
    return all(binary(component, name).is_file() for name in component.commands)


def build(component: Component) -> float:
    """Build one component if its binaries are missing; returns the seconds it took."""
    if is_built(component):
        return 0.0
    started = time.monotonic()
    info = _download(component)
    if component.own_go_mod:
        cwd = _own_module(component, info)
    elif component.copied:
        cwd = _copied_module(component, info)
    else:
        cwd = Path(info["Dir"])
    staging = cache_root() / component.key / "bin.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, path in component.commands.items():
        package = _package(component, path) if component.own_go_mod else f"./{path}"
        print(f"localcluster: building {name} ({component.module}@{component.version})")
        sys.stdout.flush()
        _go(
            [
                "build",
                "-trimpath",
                f"-ldflags={_ldflags(component)}",
                "-o",
                str(staging / name),
                package,
            ],
            cwd=cwd,
        )
    final = bin_dir(component)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    (cache_root() / component.key / "module.json").write_text(json.dumps(info, indent=1))
    took = time.monotonic() - started
    print(f"localcluster: {component.key} built in {took:.0f}s -> {final}")
    return took


def build_all() -> None:
    """Every component; one that fails does not stop the others (each failure is reported,
    then the build exits non-zero)."""
    started = time.monotonic()
    failed = []
    for component in COMPONENTS:
        try:
            build(component)
        except SystemExit as exc:
            print(exc, file=sys.stderr)
            failed.append(component.key)
    took = time.monotonic() - started
    if failed:
        raise SystemExit(f"localcluster: {', '.join(failed)} not built ({took:.0f}s)")
    print(f"localcluster: all components built ({took:.0f}s)")


if __name__ == "__main__":
    build_all()
