"""What a restarted Training API tidies after a submission cut short
(jobs/backends/kubernetes/journals.py): only the run's own leftovers, trainstack's and without an
owner. An object of the same name someone else made, or one a job owns, is never touched."""

from __future__ import annotations

from jobs.backends.kubernetes.client.ownership import MANAGED_BY, MANAGER
from jobs.backends.kubernetes.journals import tidy_submission
from jobs.backends.kubernetes.manifests import config_map_name
from jobs.backends.kubernetes.network_policy import network_policy_name
from jobs.spec import RUN_ID_LABEL
from tests.k8s.conftest import NAMESPACE

RUN = "tidy-run"


def policy(labels: dict, owners: list | None = None) -> dict:
    meta = {"name": network_policy_name(RUN), "labels": labels}
    if owners:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": {"podSelector": {}},
    }


def config_map(labels: dict) -> dict:
    meta = {"name": config_map_name(RUN), "labels": labels}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


OURS = {MANAGED_BY: MANAGER, RUN_ID_LABEL: RUN}


def test_a_same_named_object_trainstack_did_not_make_is_left_alone(apiserver, cluster):
    apiserver.put("configmaps", config_map(OURS), NAMESPACE)
    apiserver.put("networkpolicies", policy({"team": "platform"}), NAMESPACE)
    tidy_submission(cluster, RUN, None)
    assert apiserver.get("configmaps", config_map_name(RUN), NAMESPACE) is None
    assert apiserver.get("networkpolicies", network_policy_name(RUN), NAMESPACE) is not None


def test_another_runs_or_an_owned_object_is_left_alone(apiserver, cluster):
    apiserver.put("configmaps", config_map({MANAGED_BY: MANAGER, RUN_ID_LABEL: "other"}), NAMESPACE)
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "u-1"}
    apiserver.put("networkpolicies", policy(OURS, [owner]), NAMESPACE)
    tidy_submission(cluster, RUN, None)
    assert apiserver.get("configmaps", config_map_name(RUN), NAMESPACE) is not None
    assert apiserver.get("networkpolicies", network_policy_name(RUN), NAMESPACE) is not None


def test_the_runs_own_leftovers_go(apiserver, cluster):
    apiserver.put("configmaps", config_map(OURS), NAMESPACE)
    apiserver.put("networkpolicies", policy(OURS), NAMESPACE)
    tidy_submission(cluster, RUN, None)
    assert apiserver.get("configmaps", config_map_name(RUN), NAMESPACE) is None
    assert apiserver.get("networkpolicies", network_policy_name(RUN), NAMESPACE) is None
