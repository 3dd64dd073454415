"""The cluster side of what a killed Training API leaves half done (jobs/api/sweep_journal.py
decides what to do with it): sweep journals (ConfigMaps labelled JOURNAL_LABEL), and runs'
ConfigMaps without their owner (a submission cut short between its ConfigMap and its job, or
before the job became their owner)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from jobs.backends.kubernetes.client.api import Cluster
from jobs.backends.kubernetes.client.ownership import MANAGED_BY, MANAGER
from jobs.backends.kubernetes.client.submit import (
    adopt_companions,
    delete_companion,
    leftover_companions,
)
from jobs.backends.kubernetes.manifests import config_map_name
from jobs.backends.kubernetes.network_policy import RUN_ID_LABEL, network_policy_name
from jobs.spec import LABEL_PREFIX

JOURNAL_LABEL = f"{LABEL_PREFIX}/sweep-journal"


@dataclass(frozen=True)
class Found:
    """A trainstack ConfigMap as a starting service finds it."""

    name: str
    data: dict[str, str]
    created: datetime | None
    journal: bool
    run_id: str | None
    """The run whose own ConfigMap it is, when it is one and has no owner (a leftover)."""


def write_journal(cluster: Cluster, data: dict[str, str]) -> str:
    """Create a journal holding `data`; returns its name."""
    name = f"trainstack-sweep-journal-{uuid.uuid4().hex[:12]}"
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {MANAGED_BY: MANAGER, JOURNAL_LABEL: "pending"}},
        "data": data,
    }
    cluster.call(
        f"create ConfigMap {cluster.namespace}/{name}",
        cluster.core.create_namespaced_config_map,
        cluster.namespace,
        body,
    )
    return name


def delete_journal(cluster: Cluster, name: str) -> None:
    cluster.call_or_none(
        f"delete ConfigMap {cluster.namespace}/{name}",
        cluster.core.delete_namespaced_config_map,
        name,
        cluster.namespace,
    )


def found(cluster: Cluster) -> list[Found]:
    """Every journal, and every run's own ConfigMap without an owner (one listing)."""
    listing = cluster.call(
        f"list ConfigMaps in {cluster.namespace}",
        cluster.core.list_namespaced_config_map,
        cluster.namespace,
        label_selector=f"{MANAGED_BY}={MANAGER}",
    )
    result = []
    for cm in listing.items or []:
        meta = cm.metadata
        labels = meta.labels or {}
        run_id = labels.get(RUN_ID_LABEL)
        journal = JOURNAL_LABEL in labels
        leftover = (
            not journal
            and run_id is not None
            and not meta.owner_references
            and meta.name == config_map_name(run_id)  # not a data preparation's, say
        )
        if journal or leftover:
            result.append(
                Found(meta.name, dict(cm.data or {}), meta.creation_timestamp, journal, run_id)
            )
    return result


def tidy_submission(cluster: Cluster, run_id: str, job: dict | None) -> None:
    """A submission cut short: its ConfigMap and NetworkPolicy given to `job` (the run's job
    object), or deleted when there is none."""
    companions = leftover_companions(
        cluster,
        [("ConfigMap", config_map_name(run_id)), ("NetworkPolicy", network_policy_name(run_id))],
        run_id,
    )
    if job is not None:
        adopt_companions(cluster, companions, job)
        return
    for companion in companions:
        delete_companion(cluster, companion)
