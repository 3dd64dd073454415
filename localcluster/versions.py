"""What the local cluster builds, each at one version: the training stack's from
infra/settings/versions.py (a repin there rebuilds only that component), the rest pinned here.

The cache key of a component is its name and version, so two pins never share binaries.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from catalog.kubernetes import KUBERNETES_VERSION
from infra.settings import versions as stack

KUBERNETES_PATCH = "v1.35.4"
"""The patch of the cluster's minor (catalog/kubernetes.py) the control plane is built at."""
ETCD_VERSION = "v3.6.5"
"""The etcd server k8s.io/kubernetes v1.35.4 requires (its go.mod: go.etcd.io/etcd/*)."""
KWOK_VERSION = "v0.8.0"
"""kwok: simulated nodes and pod lifecycles (no kubelet, no container runtime)."""
PULUMI_VERSION = "v3.276.0"
"""The Pulumi CLI (the engine `pulumi up` runs in). The module proxy serves no pkg/v3 at the
Python SDK's 3.272.0 (constraints.txt; infra's PULUMI_CLI_VERSION, what the in-VPC deploy
installs): v3.276.0 is the nearest release after it, and a CLI newer than its SDK is supported."""
PULUMI_KUBERNETES_VERSION = "v4.0.0-20260115033456-f47bc2d6f199"
"""The Kubernetes provider: the only version of github.com/pulumi/pulumi-kubernetes/provider/v4
the module proxy serves (a 2026-01-15 commit, between the sdk/v4 v4.24.0 and v4.25.0 tags; the
tagged releases' provider module is not published). The pinned Python SDK (pulumi_kubernetes
4.34.2) asks for plugin 4.34.2: localcluster/engine.py runs this build in its place."""

if not KUBERNETES_PATCH.startswith(f"v{KUBERNETES_VERSION}."):
    raise RuntimeError(
        f"localcluster KUBERNETES_PATCH {KUBERNETES_PATCH} is not a patch of the cluster's "
        f"minor {KUBERNETES_VERSION} (catalog/kubernetes.py): repin it"
    )


def _v(version: str) -> str:
    return version if version.startswith("v") else f"v{version}"


def _pinned(name: str, version: str) -> str:
    """The pin, unless `TRAINSTACK_KUBE_OVERRIDE_<NAME>` names another version (to try one the
    module proxy has when it lacks the pin); said loudly, since the cluster then differs from
    the stack's."""
    override = os.environ.get(f"TRAINSTACK_KUBE_OVERRIDE_{name.upper().replace('-', '_')}")
    if override and _v(override) != _v(version):
        print(
            f"localcluster: WARNING {name} {_v(override)} instead of the pinned {_v(version)}",
            file=sys.stderr,
        )
        return _v(override)
    return _v(version)


@dataclass(frozen=True)
class Component:
    """One Go module and the commands built from it."""

    name: str
    module: str
    version: str
    commands: dict[str, str]
    """binary name -> package path inside the module ("." for the module's root)."""
    own_go_mod: bool = False
    """Built from a go.mod written here (the module's own has `replace` lines to folders its zip
    lacks); otherwise built inside the module's own folder, with its own go.mod and go.sum."""
    copied: bool = False
    """Built inside a writable copy of the module: its `replace` lines to folders its zip lacks
    dropped (the versions it requires come from the proxy instead) and its commands'
    `go generate` run (files their `go:embed` lines need that the zip does not carry)."""
    stamp: str | None = None
    """`-ldflags -X` stamping the version (`pkg.Var=value`, in the form the project's own
    release build writes); unset, these binaries report no version."""

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


KUBERNETES = Component(
    "kubernetes",
    "k8s.io/kubernetes",
    KUBERNETES_PATCH,
    {
        "kube-apiserver": "cmd/kube-apiserver",
        "kube-controller-manager": "cmd/kube-controller-manager",
        "kube-scheduler": "cmd/kube-scheduler",
    },
    own_go_mod=True,
)
ETCD = Component("etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION, {"etcd": "."}, own_go_mod=True)
KWOK = Component("kwok", "sigs.k8s.io/kwok", KWOK_VERSION, {"kwok": "cmd/kwok"})
JOBSET = Component(
    "jobset", "sigs.k8s.io/jobset", _pinned("jobset", stack.JOBSET_VERSION), {"jobset": "."}
)
TRAINER = Component(
    "trainer",
    "github.com/kubeflow/trainer/v2",
    _pinned("trainer", stack.KUBEFLOW_TRAINER["version"]),
    {"trainer-controller-manager": "cmd/trainer-controller-manager"},
)
KUEUE = Component(
    "kueue", "sigs.k8s.io/kueue", _pinned("kueue", stack.KUEUE["version"]), {"kueue": "cmd/kueue"}
)
TRAINING_OPERATOR = Component(
    "training-operator",
    "github.com/kubeflow/training-operator",
    _pinned("training-operator", stack.TRAINING_OPERATOR_VERSION),
    {"training-operator": "cmd/training-operator.v1"},
)
KUBERAY = Component(
    "kuberay",
    "github.com/ray-project/kuberay/ray-operator",
    _pinned("kuberay", stack.KUBERAY["version"]),
    {"kuberay-operator": "."},
)

PULUMI = Component(
    "pulumi",
    "github.com/pulumi/pulumi/pkg/v3",
    PULUMI_VERSION,
    {"pulumi": "cmd/pulumi"},
    own_go_mod=True,
    # `pulumi version` prints it as is: "v3.276.0", as a release does.
    stamp=f"github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={PULUMI_VERSION}",
)
PULUMI_KUBERNETES = Component(
    "pulumi-kubernetes",
    "github.com/pulumi/pulumi-kubernetes/provider/v4",
    PULUMI_KUBERNETES_VERSION,
    {"pulumi-resource-kubernetes": "cmd/pulumi-resource-kubernetes"},
    copied=True,
    # Without the "v", as its Makefile stamps it; generate.go writes the same into the schema.
    stamp="github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version="
    + PULUMI_KUBERNETES_VERSION.removeprefix("v"),
)

ENGINE = (PULUMI, PULUMI_KUBERNETES)
"""What `pulumi up` runs in: the CLI and the Kubernetes provider (localcluster/engine.py)."""

COMPONENTS = (
    KUBERNETES,
    ETCD,
    KWOK,
    JOBSET,
    TRAINER,
    KUEUE,
    TRAINING_OPERATOR,
    KUBERAY,
    *ENGINE,
)
"""In build order: the control plane first (the longest build, needed by everything); the
engine last (`localcluster up` needs it only once the controllers run)."""
