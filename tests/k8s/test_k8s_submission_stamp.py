"""Each submission of a PyTorchJob stamps its time on the job and on its pod templates, where
the pods read it (downward API) as the submission their start count belongs to
(trainer.pod_starts): a relaunch and the follower's resubmission are new submissions."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta

from jobs import submission as submissions
from jobs.backends.kubernetes import submitting
from jobs.backends.kubernetes.manifests import CREATED_AT
from testing_support.k8s.cluster import NAMESPACE
from testing_support.k8s.fake_operator import JobPlan


def stamps(job: dict) -> tuple[str, list[str]]:
    """The job's created-at and each replica's pod template's."""
    templates = [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return (
        job["metadata"]["annotations"][CREATED_AT],
        [t["metadata"]["annotations"][CREATED_AT] for t in templates],
    )


def test_each_submission_stamps_the_job_and_its_pod_templates(
    apiserver, trainstack, monkeypatch, capsys
):
    minutes = itertools.count()
    start = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    monkeypatch.setattr(submissions, "utc_now", lambda: start + timedelta(minutes=next(minutes)))
    submitted = []

    def recording_submit(cluster, manifests, **kwargs):
        job = next(m for m in manifests if m["kind"] == "PyTorchJob")
        submitted.append(stamps(copy.deepcopy(job)))
        return real_submit(cluster, manifests, **kwargs)

    real_submit = submitting.submit  # every submission, the follower's too, goes through it
    monkeypatch.setattr(submitting, "submit", recording_submit)
    apiserver.operator.plans["st1"] = [JobPlan(outcome="Failed"), JobPlan(), JobPlan()]
    args = ("launch", "--wait", "run_id=st1", "job.max_retries=1")
    assert trainstack(*args, launch=True) == 0  # failed, resubmitted by the follower
    assert "st1: resumed (retry 1/1)" in capsys.readouterr().out
    assert trainstack(*args, launch=True) == 0  # relaunched
    assert len(submitted) == 3
    for job_stamp, template_stamps in submitted:
        assert template_stamps and set(template_stamps) == {job_stamp}  # the job's own
    assert len({job_stamp for job_stamp, _ in submitted}) == 3, submitted  # each its own
    assert stamps(apiserver.get("pytorchjobs", "st1", NAMESPACE)) == submitted[-1]
