"""The end-to-end suite: trainstack against the real components (`localcluster`), started
once for the session in a temporary state folder and stopped after it, every process by its id.

Opt in with TRAINSTACK_E2E=1 (the first run builds the components: needs Go and minutes):

    TRAINSTACK_E2E=1 python -m pytest tests/e2e -p no:cacheprovider

Each test checks what the API server holds, not only what trainstack prints. The cluster and
its helpers are testing_support/local_control_plane.py (benchmarks start it too).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
from kubernetes.dynamic.exceptions import NotFoundError

from testing_support.local_control_plane import (
    ALL_JOBS,
    CHECKOUT_ENV,
    JOBS,
    KUEUE_API,
    NAMESPACE,
    RUN_ID_LABEL,
    TRAINSTACK,
    Cluster,
    conditions,
    eventually,
    running_cluster,
    workload_of,
)

ENABLED = os.environ.get("TRAINSTACK_E2E") == "1"
__all__ = ["CHECKOUT_ENV", "JOBS", "KUEUE_API", "TRAINSTACK"]
"""What the tests import from here and the module above holds."""


def pytest_collection_modifyitems(config, items):
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="e2e: set TRAINSTACK_E2E=1 (builds and starts localcluster)")
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(skip)


def admitted(cluster, kind: str, name: str):
    workload = workload_of(cluster, kind, name)
    if workload and conditions(workload).get("Admitted", {}).get("status") == "True":
        return workload
    return False


def pods_of(cluster, run_id: str, phase: str | None = None) -> list[dict]:
    pods = cluster.items("v1", "Pod", f"{RUN_ID_LABEL}={run_id}")
    return [p for p in pods if phase is None or p["status"].get("phase") == phase]


def remove_run(cluster: Cluster, run_id: str) -> None:
    """Delete a run's job (either kind) and ConfigMap straight through the API, and wait until
    its pods and Workload are gone: the next test starts with the whole quota free, whatever
    trainstack's cancel did."""
    selector = f"{RUN_ID_LABEL}={run_id}"
    for api_version, kind in ALL_JOBS.values():
        for job in cluster.items(api_version, kind, selector):
            cluster.resource(api_version, kind).delete(
                name=job["metadata"]["name"],
                namespace=NAMESPACE,
                body={"propagationPolicy": "Background"},
            )
    for config_map in cluster.items("v1", "ConfigMap", selector):
        # The job's deletion may have collected it already (owner reference).
        with contextlib.suppress(NotFoundError):
            cluster.resource("v1", "ConfigMap").delete(
                name=config_map["metadata"]["name"], namespace=NAMESPACE
            )
    eventually(
        lambda: (
            not pods_of(cluster, run_id)
            and not any(workload_of(cluster, kind, run_id) for _, kind in ALL_JOBS.values())
        ),
        f"{run_id}'s pods and Workload gone",
    )


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory, moto_s3) -> Iterator[Cluster]:
    """The cluster for the session (testing_support.local_control_plane.running_cluster)."""
    with running_cluster(tmp_path_factory.mktemp("localcluster"), moto_s3) as started:
        yield started
