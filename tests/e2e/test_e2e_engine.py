"""The stack's in-cluster objects come through the real Pulumi engine and Kubernetes provider
(built from their Go modules): `localcluster up` ran `pulumi up`, a `preview` right after it
changes nothing, a changed runtime is replaced (its spec is partly immutable), and `destroy`
leaves nothing of the stack behind (then `up` puts it back for the tests after these)."""

from __future__ import annotations

import copy

from kubernetes.dynamic.exceptions import NotFoundError

from localcluster import objects, program
from localcluster.engine import changes
from tests.e2e.conftest import NAMESPACE, eventually

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
KUEUE_API = "kueue.x-k8s.io/v1beta1"
CHANGED_RUNTIME = "trainstack-cpu"


def _program(cluster):
    return program.local_program(objects.local_stack(), cluster.state.kubeconfig.read_text())


def _runtime(cluster, name: str = CHANGED_RUNTIME) -> dict:
    return cluster.get(TRAINER_API, "ClusterTrainingRuntime", name, namespace=None)


def test_up_installed_through_the_engine(local_cluster):
    """The engine's state holds every object, and the API server records the provider as the
    objects' field manager (server-side apply): nothing else applied them."""
    stack = program.engine(local_cluster.state.directory).stack(_program(local_cluster))
    resources = stack.export_stack().deployment["resources"]
    types = {r["type"] for r in resources}
    assert "pulumi:providers:kubernetes" in types
    assert "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime" in types
    assert "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue" in types
    namespace = local_cluster.get("v1", "Namespace", NAMESPACE, namespace=None)
    managers = {m["manager"] for m in namespace["metadata"]["managedFields"]}
    assert any(m.startswith("pulumi-kubernetes") for m in managers), managers


def test_preview_after_up_changes_nothing(local_cluster):
    engine = program.engine(local_cluster.state.directory)
    summary = engine.preview(_program(local_cluster)).change_summary
    assert changes(summary) == {}, summary
    assert summary.get("same", 0) > 10


def test_a_changed_runtime_is_replaced(local_cluster, monkeypatch):
    """`failurePolicy` is immutable in Trainer's CRD: an update in place would be refused, so
    the engine deletes the runtime and creates it again (a new uid, the new value)."""
    engine = program.engine(local_cluster.state.directory)
    before = _runtime(local_cluster)
    built = objects.stack_objects

    def changed(config):
        made = copy.deepcopy(built(config))
        for obj in made:
            if obj["metadata"]["name"] == CHANGED_RUNTIME:
                obj["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] += 1
        return made

    monkeypatch.setattr(objects, "stack_objects", changed)
    done = engine.up(_program(local_cluster))
    assert changes(done.summary.resource_changes or {}) == {"replace": 1}
    after = _runtime(local_cluster)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    policy = after["spec"]["template"]["spec"]["failurePolicy"]
    assert (
        policy["maxRestarts"]
        == before["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] + 1
    )
    monkeypatch.undo()
    engine.up(_program(local_cluster))
    assert changes(engine.preview(_program(local_cluster)).change_summary) == {}


def _gone(cluster, api_version: str, kind: str, name: str, namespace: str | None) -> bool:
    try:
        cluster.get(api_version, kind, name, namespace)
    except NotFoundError:
        return True
    return False


def test_destroy_leaves_nothing_then_up_restores(local_cluster):
    """`pulumi destroy` (what `make cluster-down` runs first): the namespace, the runtimes and
    Kueue's objects are gone from the API server; `up` then installs them again."""
    engine = program.engine(local_cluster.state.directory)
    config = objects.local_stack()
    engine.destroy()
    wanted = [
        ("v1", "Namespace", NAMESPACE, None),
        (TRAINER_API, "ClusterTrainingRuntime", CHANGED_RUNTIME, None),
        (KUEUE_API, "ClusterQueue", config.kueue.cluster_queue, None),
        (KUEUE_API, "WorkloadPriorityClass", "high", None),
    ]
    for api_version, kind, name, namespace in wanted:
        eventually(
            lambda a=api_version, k=kind, n=name, ns=namespace: _gone(local_cluster, a, k, n, ns),
            f"{kind} {name} deleted",
            timeout=120,
        )
    changed = program.install(local_cluster.state.directory, config, local_cluster.state.kubeconfig)
    assert changed.get("create", 0) > 10, changed
    assert _runtime(local_cluster)["metadata"]["name"] == CHANGED_RUNTIME
