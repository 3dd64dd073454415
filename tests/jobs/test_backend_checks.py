"""The checks the pipeline reaches through a backend's traits (jobs.backend_registry.traits:
`job_checks`, `cluster_checks`) run on every backend and where they always ran: with two
problems in one job, the user sees the same one first whatever the backend (issue 34)."""

from __future__ import annotations

import pytest

from jobs.errors import JobConfigError
from jobs.submission import BadInput, prepare
from tests.jobs.conftest import CLUSTER, NOW, build

P5 = ["compute=p5.48xlarge", *CLUSTER]
LOCAL = ["backend=local"]

# (overrides, the key the user is told about first)
FIRST_ERRORS = {
    "the job section, on a local run": ([*LOCAL, "job.api=mpijob"], "job.api"),
    "the cluster section, on a local run": (
        [*LOCAL, "cluster.namespace=Bad_NS"],
        "cluster.namespace",
    ),
    "compute before the job's API": (
        [*P5, "compute.gpus_per_node=16", "job.api=mpijob"],
        "compute.gpus_per_node",
    ),
    "the job's API before the pod paths": (
        [*P5, "job.api=mpijob", "data.path=/nowhere/train.jsonl"],
        "job.api",
    ),
    "the image before the cluster's names": (
        [*P5, "job.image=bad image", "cluster.namespace=Bad_NS"],
        "job.image",
    ),
    "the cluster's names before the job policy": (
        [*P5, "cluster.namespace=Bad_NS", "job.max_retries=-1"],
        "cluster.namespace",
    ),
}


@pytest.mark.parametrize("case", FIRST_ERRORS, ids=list(FIRST_ERRORS))
def test_the_first_error_is_the_same_through_the_traits(case):
    overrides, key = FIRST_ERRORS[case]
    with pytest.raises(JobConfigError) as caught:
        build(overrides)
    assert caught.value.key == key, str(caught.value)


def test_a_manifest_refusal_is_bad_input():
    """The backend's manifest checks raise their own error (its `cluster.refusal`): the one way
    to make a job (the Training API's) still turns it into one line, not a traceback."""
    with pytest.raises(BadInput, match=r"cluster\.kubernetes_version"):
        prepare([*P5, "cluster.kubernetes_version=2.5"], now=NOW)
