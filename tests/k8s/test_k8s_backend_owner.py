"""What kubernetes backends share is their owner's (jobs.backend_registry.Shared, or the
Submissions one backend hands another), never a class's: two owners never see each other's
runs."""

from __future__ import annotations

from omegaconf import OmegaConf

from jobs.backend_registry import Shared, backend_for
from jobs.backends.kubernetes.backend import KubernetesBackend
from jobs.backends.kubernetes.submitting import ClusterSettings

SETTINGS = ClusterSettings(None, None, "training", job_api="pytorchjob")


def cfg():
    return OmegaConf.create(
        {
            "backend": {"name": "kubernetes", "others_runs": False, "preflight": False},
            "cluster": {
                "kubeconfig": None,
                "context": None,
                "namespace": "training",
                "node_groups": [],
                "region": None,
                "log_group": None,
            },
            "job": {"api": "pytorchjob", "owner": "ada"},
        }
    )


def test_two_backends_made_apart_share_no_submission():
    first, second = KubernetesBackend(SETTINGS), KubernetesBackend(SETTINGS)
    first.submissions.record("r1", [], 2, "uid-1")
    assert "r1" not in second.submissions.scheduled and "r1" not in second.submissions.uids
    assert second.forget("r1") is None


def test_the_backends_of_one_owner_share_its_submissions_and_no_other_owners():
    launch, other = Shared(), Shared()
    scheduling, following = backend_for(cfg(), launch), backend_for(cfg(), launch)
    scheduling.submissions.record("r1", [], 2, "uid-1")
    assert following.submissions.scheduled["r1"] == ([], 2)  # the follower may restart it
    assert "r1" not in backend_for(cfg(), other).submissions.scheduled
    assert "r1" not in backend_for(cfg()).submissions.scheduled  # no owner: its own
    assert following.forget("r1") == "uid-1"
    assert "r1" not in scheduling.submissions.scheduled
