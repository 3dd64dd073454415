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

COMPONENTS = (KUBERNETES, ETCD, KWOK, JOBSET, TRAINER, KUEUE, TRAINING_OPERATOR)
"""In build order: the control plane first (the longest build, needed by everything)."""
