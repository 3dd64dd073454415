"""The inline Pulumi program `localcluster up` runs through the real engine (localcluster/
engine.py): the stack's in-cluster objects (localcluster/objects.py builds them with infra's pure
functions), as resources of the Kubernetes provider on the local cluster's kubeconfig.

The runtimes keep infra's replacement rule (`RUNTIME_REPLACE`: deleted, then created again,
since Trainer's CRD makes part of their spec immutable); the rest is one `yaml.v2.ConfigGroup`,
which the provider orders (namespaces and cluster-scoped kinds before what lives in them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from infra.kubeflow_trainer import RUNTIME_REPLACE
from infra.settings.types import StackConfig
from localcluster import objects
from localcluster.engine import Engine, EngineError, changes

RUNTIME_KIND = "ClusterTrainingRuntime"
RETRY_AFTER_S = 5.0


def local_program(config: StackConfig, kubeconfig: str) -> Callable[[], None]:
    """The program for `config`'s objects, installed with `kubeconfig` (its text)."""

    def program() -> None:
        name = config.cluster.name
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=pulumi.Output.secret(kubeconfig))
        in_cluster = pulumi.ResourceOptions(provider=provider)
        made = objects.stack_objects(config)
        runtimes = [obj for obj in made if obj["kind"] == RUNTIME_KIND]
        group = k8s.yaml.v2.ConfigGroup(
            f"{name}-stack",
            objs=[obj for obj in made if obj["kind"] != RUNTIME_KIND],
            opts=in_cluster,
        )
        # Their pods run as the namespace's service account: created after the group.
        after = pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=[group]))
        for runtime in runtimes:
            k8s.apiextensions.CustomResource(
                f"{name}-runtime-{runtime['metadata']['name']}",
                api_version=runtime["apiVersion"],
                kind=runtime["kind"],
                metadata=runtime["metadata"],
                spec=runtime["spec"],
                opts=pulumi.ResourceOptions.merge(after, RUNTIME_REPLACE),
            )

    return program


def engine(state_directory: Path) -> Engine:
    """The local stack's engine, in the cluster's state folder."""
    return Engine(state_directory / "pulumi")


def install(state_directory: Path, config: StackConfig, kubeconfig: Path) -> dict[str, int]:
    """`pulumi up` of the local program; returns what it changed (empty: nothing to do).

    A webhook that has only just started may refuse the first call: `up` is run once more
    after a failure (it picks up where the first stopped); a real refusal fails both."""
    local = engine(state_directory)
    made = local_program(config, kubeconfig.read_text())
    try:
        done = local.up(made)
    except EngineError as exc:
        print(f"localcluster: pulumi up failed, once more in {RETRY_AFTER_S:.0f}s: {exc}")
        time.sleep(RETRY_AFTER_S)
        done = local.up(made)
    return changes(done.summary.resource_changes or {})


def preview(state_directory: Path, config: StackConfig, kubeconfig: Path) -> dict[str, int]:
    """`pulumi preview`: what an `up` would change (empty right after one)."""
    done = engine(state_directory).preview(local_program(config, kubeconfig.read_text()))
    return changes(done.change_summary)


def uninstall(state_directory: Path) -> None:
    """`pulumi destroy`: what the engine installed leaves the cluster (no-op without state)."""
    engine(state_directory).destroy()
