"""The fake apiserver applies PATCH as the real one does, by Content-Type, and the official client
picks the type the backend expects. Expected results are the Kubernetes docs' examples ("Update
API Objects in Place Using kubectl patch", on a Pod's spec instead of a Deployment's template;
the strategic-merge-patch design notes) and RFC 6902 / RFC 7386."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
from kubernetes.client.exceptions import ApiException

from testing_support.k8s.cluster import NAMESPACE, config_map
from testing_support.k8s.fake_patch import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    PatchError,
    apply_patch,
    merge_patch,
)

NGINX = {"name": "patch-demo-ctr", "image": "nginx"}
REDIS = {"name": "patch-demo-ctr-2", "image": "redis"}
TEAM = {"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}
SSD = {"effect": "NoSchedule", "key": "disktype", "value": "ssd"}


def send(apiserver, path: str, content_type: str, body) -> tuple[int, dict]:
    """One PATCH with an explicit Content-Type (the client derives it from the body)."""
    url = urlsplit(apiserver.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request("PATCH", path, data, {"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"


def put_demo_pod(apiserver) -> str:
    """The docs' patch-demo, as a Pod: one nginx container and one toleration."""
    apiserver.put(
        "pods",
        {
            "apiVersion": "v1",
            "metadata": {"name": "patch-demo", "labels": {"app": "nginx"}},
            "spec": {"containers": [dict(NGINX)], "tolerations": [dict(TEAM)]},
        },
        NAMESPACE,
    )
    return "patch-demo"


@pytest.fixture
def demo_pod(apiserver) -> str:
    return put_demo_pod(apiserver)


def pod(apiserver, name: str) -> dict:
    return apiserver.get("pods", name, NAMESPACE)


# -- strategic merge: what the client sends for a dict to a core API ------------------------------
def test_a_dict_to_a_core_api_is_a_strategic_merge_containers_by_name(apiserver, cluster, demo_pod):
    cluster.core.patch_namespaced_pod(demo_pod, NAMESPACE, {"spec": {"containers": [REDIS]}})
    # The docs' output: both containers, the patch's first (it is not in the live list).
    assert pod(apiserver, demo_pod)["spec"]["containers"] == [REDIS, NGINX]


def test_tolerations_have_no_merge_key_and_are_replaced(apiserver, cluster, demo_pod):
    cluster.core.patch_namespaced_pod(demo_pod, NAMESPACE, {"spec": {"tolerations": [SSD]}})
    assert pod(apiserver, demo_pod)["spec"]["tolerations"] == [SSD]


def test_env_and_ports_merge_by_name_and_container_port(apiserver, cluster, demo_pod):
    nginx = {"name": "patch-demo-ctr", "env": [{"name": "A", "value": "1"}, {"name": "B"}]}
    nginx["ports"] = [{"containerPort": 80, "protocol": "TCP"}]
    cluster.core.patch_namespaced_pod(demo_pod, NAMESPACE, {"spec": {"containers": [nginx]}})
    change = {
        "name": "patch-demo-ctr",
        "env": [{"name": "B", "value": "2"}],
        "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}],
    }
    cluster.core.patch_namespaced_pod(demo_pod, NAMESPACE, {"spec": {"containers": [change]}})
    (container,) = pod(apiserver, demo_pod)["spec"]["containers"]
    assert container["image"] == "nginx"
    assert container["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert container["ports"] == [
        {"containerPort": 80, "protocol": "TCP", "name": "http"},
        {"containerPort": 443},
    ]


def test_owner_references_merge_by_uid(apiserver, cluster):
    first = {"apiVersion": "v1", "kind": "Pod", "name": "a", "uid": "uid-a"}
    second = {"apiVersion": "v1", "kind": "Pod", "name": "b", "uid": "uid-b"}
    apiserver.put("configmaps", config_map("own"), NAMESPACE)
    patch = cluster.core.patch_namespaced_config_map
    patch("own-config", NAMESPACE, {"metadata": {"ownerReferences": [first]}})
    patch("own-config", NAMESPACE, {"metadata": {"ownerReferences": [second]}})
    owners = apiserver.get("configmaps", "own-config", NAMESPACE)["metadata"]["ownerReferences"]
    assert owners == [second, first]
    # The same uid again updates that entry instead of adding a second one.
    patch(
        "own-config", NAMESPACE, {"metadata": {"ownerReferences": [first | {"controller": True}]}}
    )
    owners = apiserver.get("configmaps", "own-config", NAMESPACE)["metadata"]["ownerReferences"]
    assert owners == [second, first | {"controller": True}]
    patch(
        "own-config",
        NAMESPACE,
        {"metadata": {"ownerReferences": [{"uid": "uid-b", "$patch": "delete"}]}},
    )
    owners = apiserver.get("configmaps", "own-config", NAMESPACE)["metadata"]["ownerReferences"]
    assert owners == [first | {"controller": True}]


def test_finalizers_are_a_set_and_delete_from_primitive_list(apiserver, cluster):
    apiserver.put("configmaps", {"metadata": {"name": "fin", "finalizers": ["a", "b"]}}, NAMESPACE)
    patch = cluster.core.patch_namespaced_config_map
    patch("fin", NAMESPACE, {"metadata": {"finalizers": ["b", "c"]}})
    assert apiserver.get("configmaps", "fin", NAMESPACE)["metadata"]["finalizers"] == [
        "a",
        "b",
        "c",
    ]
    patch("fin", NAMESPACE, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}})
    assert apiserver.get("configmaps", "fin", NAMESPACE)["metadata"]["finalizers"] == ["a", "c"]


def test_patch_directives_replace_and_delete(apiserver, cluster, demo_pod):
    patch = cluster.core.patch_namespaced_pod
    patch(demo_pod, NAMESPACE, {"spec": {"containers": [REDIS]}})
    # A list element `$patch: delete` removes the element with that merge key.
    patch(
        demo_pod,
        NAMESPACE,
        {"spec": {"containers": [{"name": "patch-demo-ctr", "$patch": "delete"}]}},
    )
    assert pod(apiserver, demo_pod)["spec"]["containers"] == [REDIS]
    # A list element `$patch: replace` makes the patch's other elements the whole list.
    patch(demo_pod, NAMESPACE, {"spec": {"containers": [NGINX, {"$patch": "replace"}]}})
    assert pod(apiserver, demo_pod)["spec"]["containers"] == [NGINX]
    # In a map, `$patch: replace` replaces the map, `$patch: delete` empties it.
    patch(demo_pod, NAMESPACE, {"metadata": {"labels": {"tier": "web", "$patch": "replace"}}})
    assert pod(apiserver, demo_pod)["metadata"]["labels"] == {"tier": "web"}
    patch(demo_pod, NAMESPACE, {"metadata": {"labels": {"$patch": "delete"}}})
    assert pod(apiserver, demo_pod)["metadata"]["labels"] == {}
    # null deletes a key, as in a merge patch.
    patch(demo_pod, NAMESPACE, {"spec": {"tolerations": None}})
    assert "tolerations" not in pod(apiserver, demo_pod)["spec"]


def test_set_element_order_reorders_a_merged_list(apiserver, cluster, demo_pod):
    env = [{"name": n, "value": n.lower()} for n in "ABC"]
    cluster.core.patch_namespaced_pod(
        demo_pod, NAMESPACE, {"spec": {"containers": [{"name": "patch-demo-ctr", "env": env}]}}
    )
    container = {
        "name": "patch-demo-ctr",
        "$setElementOrder/env": [{"name": "C"}, {"name": "A"}, {"name": "B"}],
        "env": [{"name": "A", "value": "new"}],
    }
    cluster.core.patch_namespaced_pod(demo_pod, NAMESPACE, {"spec": {"containers": [container]}})
    (merged,) = pod(apiserver, demo_pod)["spec"]["containers"]
    assert merged["env"] == [
        {"name": "C", "value": "c"},
        {"name": "A", "value": "new"},
        {"name": "B", "value": "b"},
    ]


def test_retain_keys_clears_the_other_union_members():
    # The docs' retainkeys-demo Deployment: RollingUpdate -> Recreate drops rollingUpdate.
    deployment = {
        "metadata": {"name": "retainkeys-demo", "uid": "u", "resourceVersion": "1"},
        "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "30%"}}},
    }
    body = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    patched = apply_patch(
        "apps", "deployments", STRATEGIC_MERGE_PATCH, deployment, json.dumps(body).encode()
    )
    assert patched["spec"]["strategy"] == {"type": "Recreate"}
    with pytest.raises(PatchError) as refused:  # every key the patch sets must be retained
        body = {"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}
        apply_patch(
            "apps", "deployments", STRATEGIC_MERGE_PATCH, deployment, json.dumps(body).encode()
        )
    assert refused.value.code == 400


# -- merge patch and JSON patch -------------------------------------------------------------------
def test_a_merge_patch_replaces_lists(apiserver, demo_pod):
    # The docs' patch-file-2 with --type merge: the container list is replaced.
    ctr3 = {"name": "patch-demo-ctr-3", "image": "gcr.io/google-samples/hello-app:2.0"}
    status, _ = send(apiserver, pod_path(demo_pod), MERGE_PATCH, {"spec": {"containers": [ctr3]}})
    assert status == 200
    assert pod(apiserver, demo_pod)["spec"]["containers"] == [ctr3]
    status, _ = send(apiserver, pod_path(demo_pod), MERGE_PATCH, {"metadata": {"labels": None}})
    assert status == 200 and "labels" not in pod(apiserver, demo_pod)["metadata"]


@pytest.mark.parametrize(
    ("original", "patch", "result"),
    [  # RFC 7386, Appendix A, every example
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_is_rfc_7386(original, patch, result):
    assert merge_patch(original, patch) == result


def test_a_list_to_a_core_api_is_a_json_patch(apiserver, cluster, demo_pod):
    operations = [
        {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.27"},
        {"op": "add", "path": "/metadata/labels/tier", "value": "web"},
        {"op": "remove", "path": "/spec/tolerations/0"},
        {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copied"},
    ]
    cluster.core.patch_namespaced_pod(demo_pod, NAMESPACE, operations)
    patched = pod(apiserver, demo_pod)
    assert patched["spec"]["containers"] == [{"name": "patch-demo-ctr", "image": "nginx:1.27"}]
    assert patched["metadata"]["labels"] == {"app": "nginx", "tier": "web", "copied": "nginx"}
    assert patched["spec"]["tolerations"] == []
    # A failing `test` op fails the whole patch (422) and changes nothing.
    before = pod(apiserver, demo_pod)
    failing = [
        {"op": "add", "path": "/metadata/labels/x", "value": "y"},
        {"op": "test", "path": "/metadata/labels/tier", "value": "db"},
    ]
    with pytest.raises(ApiException) as refused:
        cluster.core.patch_namespaced_pod(demo_pod, NAMESPACE, failing)
    assert refused.value.status == 422
    assert pod(apiserver, demo_pod) == before
