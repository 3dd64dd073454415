"""Checks on where a job runs: `compute.*` (instance type, GPUs and EFA share, nodes) and
`job.elastic`."""

from __future__ import annotations

from typing import Any

from catalog import INSTANCE_TYPES
from catalog.pods import pod_resources
from jobs.errors import JobConfigError
from jobs.schema import CAPACITY_TYPES, LOCAL_CPU
from jobs.spec import elastic_of, procs_per_node
from jobs.validate_common import at_least, at_most, in_pods, listed

MAX_NODES = 1024
"""The most nodes one job may ask for (compute.nodes, job.elastic.max_nodes): above any node
group a stack runs (an elastic range is checked with one plan, plus arithmetic per size)."""


def data_parallel_sizes(cfg: Any) -> list[int]:
    """Every world size the job can run at (elastic jobs: each node count in range)."""
    elastic = elastic_of(cfg)
    nodes = range(elastic.min_nodes, elastic.max_nodes + 1) if elastic else [cfg.compute.nodes]
    return [n * procs_per_node(cfg.compute) for n in nodes]


def check_compute(cfg: Any) -> None:
    compute, backend, pods = cfg.compute, cfg.backend.name, in_pods(cfg)
    at_least("compute.nodes", compute.nodes, 1)
    at_most("compute.nodes", compute.nodes, MAX_NODES)
    gpu_types = listed(INSTANCE_TYPES)
    if compute.name == LOCAL_CPU:
        if pods:
            raise JobConfigError(
                "compute",
                f"local_cpu runs only with backend=local; for "
                f"backend={backend} choose one of {gpu_types}",
            )
        if compute.nodes != 1:
            raise JobConfigError(
                "compute.nodes",
                f"local_cpu runs on this one machine; allowed: 1, got {compute.nodes}",
            )
        at_least("compute.procs_per_node", compute.procs_per_node, 1)
        if compute.instance_type is not None:
            raise JobConfigError(
                "compute.instance_type",
                f"local_cpu runs on this machine; allowed: null (or compute=<one of {gpu_types}>)",
            )
        return
    if compute.capacity not in CAPACITY_TYPES:
        raise JobConfigError(
            "compute.capacity",
            f"{compute.capacity!r} is not allowed; allowed: {listed(CAPACITY_TYPES)}",
        )
    if compute.instance_type not in INSTANCE_TYPES:
        raise JobConfigError(
            "compute.instance_type",
            f"unknown instance type {compute.instance_type!r}; allowed: {gpu_types}",
        )
    if not pods:
        raise JobConfigError(
            "backend",
            f"compute={compute.name} needs a cluster: use "
            "backend=render or backend=kubernetes (local runs compute=local_cpu)",
        )
    gpus = INSTANCE_TYPES[compute.instance_type].gpus
    if not 1 <= compute.gpus_per_node <= gpus:
        raise JobConfigError(
            "compute.gpus_per_node",
            f"{compute.instance_type} has {gpus} "
            f"GPUs; allowed: 1..{gpus}, got {compute.gpus_per_node}",
        )
    check_efa_share(compute.instance_type, compute.gpus_per_node)


def check_efa_share(instance_type: str, gpus_per_node: int) -> None:
    """Pods on an EFA instance set FI_PROVIDER=efa (catalog.pods.EFA_ENV):
    each must also be given an EFA device, or NCCL fails at start on every node, long after
    submission."""
    instance = INSTANCE_TYPES[instance_type]
    if not instance.has_efa or pod_resources(instance, gpus_per_node).efa >= 1:
        return
    with_efa = [g for g in range(1, instance.gpus + 1) if pod_resources(instance, g).efa >= 1]
    raise JobConfigError(
        "compute.gpus_per_node",
        f"{gpus_per_node} of {instance_type}'s GPUs would get no EFA device while its pods set "
        f"FI_PROVIDER=efa; allowed: {listed(with_efa) or 'none (an EFA share is missing)'}",
    )


def check_elastic(cfg: Any) -> None:
    elastic = cfg.job.elastic
    if elastic.min_nodes is None and elastic.max_nodes is None:
        return
    if elastic.min_nodes is None or elastic.max_nodes is None:
        raise JobConfigError(
            "job.elastic", "set both min_nodes and max_nodes (or neither for a fixed-size job)"
        )
    at_least("job.elastic.min_nodes", elastic.min_nodes, 1)
    at_most("job.elastic.max_nodes", elastic.max_nodes, MAX_NODES)
    if elastic.min_nodes > elastic.max_nodes:
        raise JobConfigError(
            "job.elastic.min_nodes",
            f"{elastic.min_nodes} is above "
            f"job.elastic.max_nodes ({elastic.max_nodes}); allowed: min <= max",
        )
    if not elastic.min_nodes <= cfg.compute.nodes <= elastic.max_nodes:
        raise JobConfigError(
            "compute.nodes",
            f"{cfg.compute.nodes} is outside the elastic "
            f"range; allowed: {elastic.min_nodes}..{elastic.max_nodes}",
        )
    if cfg.compute.name == LOCAL_CPU:
        raise JobConfigError(
            "job.elastic", "elastic jobs need a cluster backend; allowed with local_cpu: null"
        )
