"""What localcluster reads of the running cluster's RayJobs and pods, as the API server's own
JSON (camelCase dicts, not the client's models), behind a small interface a test can stand in
for with a recorded listing (testing_support/kube_listing.py).

A RayJob's submitter, as KubeRay v1.6.2 makes it (ray-operator/controllers/ray/
rayjob_controller.go, createNewK8sJob; common.RayJobK8sJobNamespacedName): a batch Job of the
RayJob's own name and namespace, controlled by the RayJob; the Job controller labels its pods
`batch.kubernetes.io/job-name=<name>` and makes itself their controller. The head and worker
pods are the RayCluster's, never the Job's.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

EXIT_CODE_ANNOTATION = "localcluster.trainstack.io/exit-code"
"""Set it on a running pod (`python -m localcluster finish`) and kwok ends it with that exit
code: 0 succeeds, anything else fails (137: as if killed)."""
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
RAYJOBS = "/apis/ray.io/v1/rayjobs"


class Kube(Protocol):
    """The reads and the one write localcluster makes; objects are the API's JSON."""

    def rayjobs(self, selector: str | None = None) -> list[dict]:
        """RayJobs of every namespace (none when the CRD is not installed)."""
        ...

    def job(self, namespace: str, name: str) -> dict | None:
        """The batch Job, or None."""
        ...

    def pods(self, namespace: str | None, selector: str) -> list[dict]:
        """Pods matching the label selector, in `namespace` (None: every namespace)."""
        ...

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None: ...


class ApiKube:
    """`Kube` over the API server, through the `kubernetes` client's ApiClient."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path | str) -> ApiKube:
        from kubernetes import config

        return cls(config.new_client_from_config(str(kubeconfig)))

    def _call(self, method: str, path: str, query: list | None = None, body: Any = None):
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json"
        try:
            response = self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=10,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def _items(self, path: str, selector: str | None) -> list[dict]:
        listed = self._call("GET", path, [("labelSelector", selector)] if selector else None)
        return list(listed["items"]) if listed else []

    def rayjobs(self, selector: str | None = None) -> list[dict]:
        return self._items(RAYJOBS, selector)

    def job(self, namespace: str, name: str) -> dict | None:
        return self._call("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")

    def pods(self, namespace: str | None, selector: str) -> list[dict]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        return self._items(path, selector)

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body={"metadata": {"annotations": annotations}},
        )


def owned_by(obj: dict, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def timestamp(value: str | None) -> datetime | None:
    """An API time (RFC 3339, seconds or finer) as an aware datetime."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def submitter_pods(kube: Kube, rayjob: dict) -> list[dict]:
    """The pods of the RayJob's submitter Job, oldest first (each retry of `ray job submit` is
    a new pod of the same Job); none before KubeRay has created the Job."""
    meta = rayjob["metadata"]
    job = kube.job(meta["namespace"], meta["name"])
    if job is None or not owned_by(job, meta["uid"]):
        return []
    job_uid = job["metadata"]["uid"]
    pods = [
        pod
        for pod in kube.pods(meta["namespace"], f"{JOB_NAME_LABEL}={meta['name']}")
        if owned_by(pod, job_uid)
    ]
    return sorted(
        pods,
        key=lambda pod: (pod["metadata"].get("creationTimestamp") or "", pod["metadata"]["name"]),
    )
