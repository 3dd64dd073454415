"""The backend's public side of a rollback (`withdraw`) and of the owner check (`check_ours`):
what the Training API asks instead of reaching into the client (issue 34 item 2)."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from jobs.backends.kubernetes.backend import KubernetesBackend
from jobs.backends.kubernetes.client.ownership import MANAGED_BY, MANAGER, NotOurs
from jobs.backends.kubernetes.run_status import SWEEP_LABEL
from jobs.backends.kubernetes.submitting import ClusterSettings
from jobs.spec import OWNER_LABEL
from testing_support.k8s.cluster import NAMESPACE

REPO = Path(__file__).resolve().parents[2]
CLIENT = "jobs.backends.kubernetes.client"
LABELS = {OWNER_LABEL: "ada", SWEEP_LABEL: "s1"}


@pytest.fixture
def backend(cluster) -> KubernetesBackend:
    made = KubernetesBackend(ClusterSettings(None, None, NAMESPACE, job_api="pytorchjob"))
    made._cluster = cluster
    return made


def put_job(apiserver, name: str, **labels: str) -> str:
    job = {"metadata": {"name": name, "labels": labels}, "spec": {"pytorchReplicaSpecs": {}}}
    return apiserver.put("pytorchjobs", job, NAMESPACE)["metadata"]["uid"]


def gone(apiserver, name: str) -> bool:
    deadline = time.monotonic() + 10  # Foreground deletes finish after the fake's delay
    while apiserver.get("pytorchjobs", name, NAMESPACE) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_withdraw_deletes_only_the_job_it_submitted(apiserver, backend):
    ours = {MANAGED_BY: MANAGER, **LABELS}
    uid = put_job(apiserver, "w1", **ours)
    assert backend.withdraw("w1", uid, LABELS) is False
    assert gone(apiserver, "w1")
    assert backend.withdraw("w1", uid, LABELS) is False  # nothing left to delete
    # resubmitted since (another uid), unknown uid, another user's, not trainstack's: left
    for name, uid_of, labels in [
        ("w2", lambda uid: "another-uid", ours),
        ("w3", lambda uid: None, ours),
        ("w4", lambda uid: uid, {**ours, OWNER_LABEL: "bob"}),
        ("w5", lambda uid: uid, LABELS),
    ]:
        uid = put_job(apiserver, name, **labels)
        assert backend.withdraw(name, uid_of(uid), LABELS) is True, name
        assert apiserver.get("pytorchjobs", name, NAMESPACE) is not None, name


def test_check_ours_refuses_a_job_trainstack_did_not_make(apiserver, backend):
    backend.check_ours("c1", None)
    put_job(apiserver, "c1", **{MANAGED_BY: MANAGER})
    backend.check_ours("c1", backend.find("c1"))
    put_job(apiserver, "c2")
    with pytest.raises(NotOurs, match=f"^PyTorchJob {NAMESPACE}/c2 exists and is not managed"):
        backend.check_ours("c2", backend.find("c2"))


def test_the_api_imports_nothing_from_the_kubernetes_client():
    """The API uses the backend's public interface only (lint-imports checks it too)."""
    found = []
    for path in sorted((REPO / "jobs" / "api").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [
                f"{path.name}: {n}"
                for n in names
                if n.startswith("jobs.backends.kubernetes.client")
            ]
    assert found == []
