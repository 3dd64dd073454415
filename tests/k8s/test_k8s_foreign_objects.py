"""trainstack never changes what it did not make (issue 23, item 4): a same-named ConfigMap,
PyTorchJob or batch Job without the managed-by label is refused with one line, exit 2, and
left exactly as it was."""

from __future__ import annotations

import pytest

from testing_support.k8s.cluster import NAMESPACE

FOREIGN_IMAGE = "teamb.example.com/eval:7"


def foreign_config_map(apiserver, name: str) -> dict:
    return apiserver.put(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"app": "payroll"}},
            "data": {"rates.csv": "alice,100\n"},
        },
        NAMESPACE,
    )


def foreign_job(apiserver, name: str, state: str = "Succeeded") -> dict:
    template = {"spec": {"containers": [{"name": "pytorch", "image": FOREIGN_IMAGE}]}}
    return apiserver.put(
        "pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "labels": {"team": "b"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
            "status": {"conditions": [{"type": state, "status": "True"}]},
        },
        NAMESPACE,
    )


def unchanged(apiserver, plural: str, before: dict) -> bool:
    now = apiserver.get(plural, before["metadata"]["name"], NAMESPACE)
    return now is not None and now == before


def test_launch_refuses_to_replace_a_foreign_config_map(apiserver, trainstack, capsys):
    before = foreign_config_map(apiserver, "payroll-config")
    assert trainstack("launch", "run_id=payroll", launch=True) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"trainstack launch: ConfigMap {NAMESPACE}/payroll-config exists and is not managed by "
        "trainstack (no app.kubernetes.io/managed-by=trainstack label); left as it is: pick "
        "another run_id"
    )
    assert unchanged(apiserver, "configmaps", before)
    assert apiserver.get("pytorchjobs", "payroll", NAMESPACE) is None
    assert apiserver.count("PUT", "configmaps") == 0


def test_launch_refuses_to_resume_a_foreign_pytorchjob(apiserver, trainstack, capsys):
    before = foreign_job(apiserver, "teamb-eval")
    assert trainstack("launch", "run_id=teamb-eval", launch=True) == 2
    assert "PyTorchJob training/teamb-eval exists and is not managed" in capsys.readouterr().err
    assert unchanged(apiserver, "pytorchjobs", before)  # same uid, same image
    assert apiserver.get("configmaps", "teamb-eval-config", NAMESPACE) is None


def test_cancel_refuses_a_foreign_pytorchjob(apiserver, trainstack, capsys):
    before = foreign_job(apiserver, "teamb-train", state="Running")
    assert trainstack("cancel", "teamb-train", "--backend", "kubernetes") == 2
    assert "not managed by trainstack" in capsys.readouterr().err
    assert unchanged(apiserver, "pytorchjobs", before)


def test_data_prepare_never_adopts_a_foreign_batch_job(apiserver, cluster):
    from jobs.backends.kubernetes.client.batch import submit_job
    from jobs.backends.kubernetes.client.ownership import NotOurs

    theirs = apiserver.put(
        "jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "prep-1"},
            "spec": {"template": {"spec": {"containers": [{"name": "x", "image": FOREIGN_IMAGE}]}}},
        },
        NAMESPACE,
    )
    ours = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "prep-1", "labels": {"app.kubernetes.io/managed-by": "trainstack"}},
        "spec": {"template": {"spec": {"containers": []}}},
    }
    with pytest.raises(NotOurs, match="Job training/prep-1 exists and is not managed"):
        submit_job(cluster, ours)
    assert unchanged(apiserver, "jobs", theirs)
