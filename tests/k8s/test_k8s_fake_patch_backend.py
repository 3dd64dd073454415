"""What else the apiserver does with a PATCH that the backend meets: 415 for a strategic merge
on a custom resource (and for unknown types), a resourceVersion in the patch as a precondition,
status only through the status subresource; and the backend's own PATCHes (the ConfigMap's
owner reference, cancel's merge patch) against it, with the garbage collector's view of owners."""

from __future__ import annotations

from jobs.backends.kubernetes.client.submit import submit
from testing_support.k8s.cluster import MANAGED, NAMESPACE, config_map, pytorch_job
from testing_support.k8s.fake_patch import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
)
from tests.k8s.test_k8s_fake_patch import pod, pod_path, put_demo_pod, send


def test_a_resource_version_in_a_patch_is_a_precondition_and_identity_is_fixed(apiserver):
    demo_pod = put_demo_pod(apiserver)
    stale = {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}}
    status, answer = send(apiserver, pod_path(demo_pod), MERGE_PATCH, stale)
    assert (status, answer["reason"]) == (409, "Conflict")
    current = pod(apiserver, demo_pod)["metadata"]["resourceVersion"]
    fresh = {"metadata": {"resourceVersion": current, "labels": {"x": "y"}}}
    assert send(apiserver, pod_path(demo_pod), STRATEGIC_MERGE_PATCH, fresh)[0] == 200
    # Neither can a patch move the object or change its uid.
    for meta, code in (({"name": "other"}, 400), ({"namespace": "x"}, 400), ({"uid": "u"}, 409)):
        assert send(apiserver, pod_path(demo_pod), MERGE_PATCH, {"metadata": meta})[0] == code
    assert pod(apiserver, demo_pod)["metadata"]["labels"] == {"app": "nginx", "x": "y"}


def test_a_strategic_merge_patch_on_a_custom_resource_is_415(apiserver, cluster):
    submit(cluster, [config_map("cr1"), pytorch_job("cr1")])
    path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs/cr1"
    body = {"metadata": {"labels": {"x": "y"}}}
    status, answer = send(apiserver, path, STRATEGIC_MERGE_PATCH, body)
    assert status == 415
    assert answer["reason"] == "UnsupportedMediaType"
    assert answer["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    assert "x" not in (
        apiserver.get("pytorchjobs", "cr1", NAMESPACE)["metadata"].get("labels") or {}
    )
    # What the backend sends (CustomObjectsApi: always merge-patch) is served.
    cluster.patch_job("cr1", body)
    assert apiserver.get("pytorchjobs", "cr1", NAMESPACE)["metadata"]["labels"] == {
        **MANAGED,
        "x": "y",
    }
    # Kueue's kinds are custom resources too.
    apiserver.put("workloads", {"metadata": {"name": "pytorchjob-cr1"}}, NAMESPACE)
    path = f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/workloads/pytorchjob-cr1"
    assert send(apiserver, path, STRATEGIC_MERGE_PATCH, body)[0] == 415
    assert send(apiserver, path, MERGE_PATCH, body)[0] == 200


def test_an_unknown_content_type_is_415_and_apply_is_not_faked(apiserver):
    demo_pod = put_demo_pod(apiserver)
    status, answer = send(apiserver, pod_path(demo_pod), "application/json", {"metadata": {}})
    assert status == 415
    assert STRATEGIC_MERGE_PATCH in answer["message"] and JSON_PATCH in answer["message"]
    status, answer = send(apiserver, pod_path(demo_pod), APPLY_PATCH, b"metadata: {}\n")
    assert status == 501  # server-side apply: not used by trainstack, not pretended here
    assert send(apiserver, pod_path(demo_pod), MERGE_PATCH, b"{not json")[0] == 400
    assert send(apiserver, pod_path("nobody"), MERGE_PATCH, {})[0] == 404


def test_submit_leaves_its_config_map_exactly_one_owner_over_a_stale_one(apiserver, cluster):
    # Owner references merge by uid: had submit patched a leftover instead of replacing it, the
    # stale owner would stay next to the new one (and a real GC would keep the map alive).
    leftover = config_map("st")
    stale = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "st", "uid": "gone"}
    leftover["metadata"]["ownerReferences"] = [stale]
    apiserver.put("configmaps", leftover, NAMESPACE)
    created = submit(cluster, [config_map("st"), pytorch_job("st")]).job
    owners = apiserver.get("configmaps", "st-config", NAMESPACE)["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners] == [created["metadata"]["uid"]]


def test_a_dependent_with_another_live_owner_only_loses_the_reference(apiserver):
    apiserver.put("configmaps", config_map("o1"), NAMESPACE)
    apiserver.put("configmaps", config_map("o2"), NAMESPACE)
    uids = [
        apiserver.get("configmaps", f"{n}-config", NAMESPACE)["metadata"]["uid"]
        for n in ("o1", "o2")
    ]
    refs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": f"o{i}", "uid": u}
        for i, u in enumerate(uids, 1)
    ]
    dependent = {"metadata": {"name": "dep", "ownerReferences": refs}}
    apiserver.put("configmaps", dependent, NAMESPACE)
    apiserver.remove("configmaps", "o1-config", NAMESPACE)
    owners = apiserver.get("configmaps", "dep", NAMESPACE)["metadata"]["ownerReferences"]
    assert owners == refs[1:]
    apiserver.remove("configmaps", "o2-config", NAMESPACE)
    assert apiserver.get("configmaps", "dep", NAMESPACE) is None


def test_status_changes_only_through_the_status_subresource(apiserver, cluster):
    submit(cluster, [config_map("st1"), pytorch_job("st1", workers=0)])
    apiserver.operator.wait_idle()
    path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs/st1"
    before = apiserver.get("pytorchjobs", "st1", NAMESPACE)["status"]
    body = {"metadata": {"labels": {"x": "y"}}, "status": {"conditions": []}}
    assert send(apiserver, path, MERGE_PATCH, body)[0] == 200
    job = apiserver.get("pytorchjobs", "st1", NAMESPACE)
    assert job["status"] == before and job["metadata"]["labels"] == {**MANAGED, "x": "y"}
    body = {"metadata": {"labels": {"x": "z"}}, "status": {"conditions": []}}
    assert send(apiserver, path + "/status", MERGE_PATCH, body)[0] == 200
    job = apiserver.get("pytorchjobs", "st1", NAMESPACE)
    assert job["status"] == {**before, "conditions": []}
    assert job["metadata"]["labels"] == {**MANAGED, "x": "y"}
