"""The object store behind the Kubernetes API test double: objects, resourceVersions, events.

Objects are plain dicts keyed by (plural, namespace, name). Every change bumps one global
resourceVersion and appends a watch event; deleting an object deletes what it owns, as the
garbage collector does. Used by `fake_apiserver` (HTTP) and directly by tests and the fake
operator. Test-only: never shipped.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid

CLUSTER_SCOPED = {
    "namespaces",
    "nodes",
    "customresourcedefinitions",
    "persistentvolumes",
    "clusterqueues",
    "resourceflavors",
    "clustertrainingruntimes",
}
KINDS = {
    "namespaces": "Namespace",
    "nodes": "Node",
    "serviceaccounts": "ServiceAccount",
    "configmaps": "ConfigMap",
    "pods": "Pod",
    "pytorchjobs": "PyTorchJob",
    "customresourcedefinitions": "CustomResourceDefinition",
    "workloads": "Workload",
    "localqueues": "LocalQueue",
    "clusterqueues": "ClusterQueue",
    "jobs": "Job",
    "trainjobs": "TrainJob",
    "jobsets": "JobSet",
    "clustertrainingruntimes": "ClusterTrainingRuntime",
    "networkpolicies": "NetworkPolicy",
}


class ObjectStore:
    def __init__(self, history: int = 10_000) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name)
        self.events: list[tuple[int, str, str, dict]] = []  # (rv, plural, type, object)
        self.history = history
        """Events kept for watches; older resourceVersions get 410 Gone."""
        self.rv = 100
        self.cond = threading.Condition()
        """Guards everything here; notified on every change (watches and log follows wait)."""

    def put(self, plural: str, obj: dict, namespace: str = "") -> dict:
        """Create or replace an object, recording a watch event."""
        with self.cond:
            meta = obj.setdefault("metadata", {})
            key = (plural, "" if plural in CLUSTER_SCOPED else namespace, meta["name"])
            existing = self.objects.get(key)
            if key[1]:
                meta["namespace"] = key[1]
            meta.setdefault("uid", existing["metadata"]["uid"] if existing else str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            obj.setdefault("kind", KINDS[plural])
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            self.objects[key] = obj
            self._record(plural, "MODIFIED" if existing else "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, plural: str, name: str, namespace: str = "") -> dict | None:
        with self.cond:
            obj = self.objects.get((plural, "" if plural in CLUSTER_SCOPED else namespace, name))
            return copy.deepcopy(obj) if obj else None

    def update(self, plural: str, name: str, namespace: str, mutate) -> dict | None:
        """Apply `mutate(obj)` to a stored object atomically (no-op when it is gone)."""
        with self.cond:
            obj = self.get(plural, name, namespace)
            if obj is None:
                return None
            mutate(obj)
            return self.put(plural, obj, namespace)

    def remove(self, plural: str, name: str, namespace: str = "") -> dict | None:
        """Delete an object and, like the garbage collector, what it owns: a dependent goes
        once none of its owners exists; one with another owner left only loses the reference."""
        with self.cond:
            key = (plural, "" if plural in CLUSTER_SCOPED else namespace, name)
            obj = self.objects.pop(key, None)
            if obj is None:
                return None
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._record(plural, "DELETED", obj)
            uid = obj["metadata"]["uid"]
            alive = {o["metadata"]["uid"] for o in self.objects.values()}
            for (dep_plural, dep_ns, dep_name), dep in list(self.objects.items()):
                owners = dep["metadata"].get("ownerReferences") or []
                if not any(o.get("uid") == uid for o in owners):
                    continue
                if any(o.get("uid") in alive for o in owners):
                    self.drop_owner(dep_plural, dep_name, dep_ns, uid)
                else:
                    self.remove(dep_plural, dep_name, dep_ns)
            return obj

    def drop_owner(self, plural: str, name: str, namespace: str, uid: str) -> None:
        def without(obj: dict) -> None:
            owners = obj["metadata"].get("ownerReferences") or []
            obj["metadata"]["ownerReferences"] = [o for o in owners if o.get("uid") != uid]

        self.update(plural, name, namespace, without)

    def orphan_dependents(self, uid: str) -> None:
        """Drop the owner reference `uid` from every object (propagationPolicy Orphan)."""
        with self.cond:
            for (plural, namespace, name), obj in list(self.objects.items()):
                owners = obj["metadata"].get("ownerReferences") or []
                if any(o.get("uid") == uid for o in owners):
                    self.drop_owner(plural, name, namespace, uid)

    def list(self, plural: str, namespace: str = "", selector: dict | None = None) -> list[dict]:
        with self.cond:
            return [
                copy.deepcopy(obj)
                for (p, ns, _), obj in sorted(self.objects.items())
                if p == plural and (not namespace or ns == namespace) and matches(obj, selector)
            ]

    def _record(self, plural: str, event_type: str, obj: dict) -> None:
        self.events.append((self.rv, plural, event_type, copy.deepcopy(obj)))
        del self.events[: -self.history]
        self.cond.notify_all()


def matches(obj: dict, selector: dict | None) -> bool:
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    for key, (op, value) in selector.get("labels", {}).items():
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
    name = selector.get("name")
    return name is None or obj["metadata"]["name"] == name


def parse_selector(query: dict) -> dict:
    selector: dict = {"labels": {}}
    for term in filter(None, (query.get("labelSelector", [""])[0]).split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            selector["labels"][key] = ("!=", value)
        elif "=" in term:
            key, value = term.split("=", 1)
            selector["labels"][key] = ("=", value.lstrip("="))
        else:
            selector["labels"][term] = ("exists", None)
    for term in filter(None, (query.get("fieldSelector", [""])[0]).split(",")):
        key, value = term.split("=", 1)
        if key == "metadata.name":
            selector["name"] = value.lstrip("=")
    return selector
