"""Process group and device set-up: nccl on CUDA, gloo on CPU; one process works too."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass
class Distributed:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh
    """("dp",) for full sharding; ("dp_replicate", "dp_shard") for HSDP."""
    checkpoint_group: dist.ProcessGroup
    """A separate gloo group for DCP, whose async saves run collectives from a background
    thread: sharing the training group would interleave them with the loop's all-reduces."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def dp_size(self) -> int:
        return self.mesh.size()

    @property
    def dp_rank(self) -> int:
        """This rank's index over all data-parallel ranks, the mesh flattened row-major:
        what the data loader splits the batch by (each replica's shards read different
        rows, like every rank in full sharding)."""
        if self.mesh.ndim == 1:
            return self.mesh.get_local_rank()
        shard = self.mesh.size(1)
        return self.mesh.get_local_rank(0) * shard + self.mesh.get_local_rank(1)

    def barrier(self) -> None:
        dist.barrier(group=self.checkpoint_group)


def env_rank() -> int:
    """The rank before the process group exists (torchrun sets RANK; plain python is 0)."""
    return int(os.environ.get("RANK", "0"))


def init_distributed(dp_replicate: int = 1, collective_timeout_s: float = 600) -> Distributed:
    """`dp_replicate` > 1: a 2-D (replicate, shard) mesh for HSDP; its rows are consecutive
    ranks, so with dp_shard = processes per node each replica is sharded within a node.
    `collective_timeout_s` (trainer.collective_timeout_s) bounds every collective of both
    groups: a rank whose peer died or hangs raises after it instead of torch's 10-30 min
    default, its process exits and torchrun restarts the ranks from the last checkpoint."""
    timeout = timedelta(seconds=collective_timeout_s)
    rank = env_rank()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(
            backend,
            rank=rank,
            world_size=world_size,
            device_id=_dev(device),
            timeout=timeout,
            store=_round_store(world_size, timeout),
        )
    else:
        # `python -m trainer`: a single process, an in-memory store, no port to pick.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    if dp_replicate > 1:
        shape, names = (dp_replicate, world_size // dp_replicate), ("dp_replicate", "dp_shard")
    else:
        shape, names = (world_size,), ("dp",)
    mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
    return Distributed(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        device=device,
        mesh=mesh,
        checkpoint_group=dist.new_group(backend="gloo", timeout=timeout),
    )


def _round_store(world_size: int, timeout: timedelta) -> dist.Store | None:
    """Under torchrun's c10d rendezvous every round's ranks use the agent's one TCPStore, and
    the process-group keys of the round before are still there: a restarted rank may read a
    dead peer's address and hang. `trainer.launch` passes the round; keys get its prefix.
    None (torch's own env:// store) otherwise."""
    round_ = os.environ.get("TRAINSTACK_RDZV_ROUND")
    if round_ is None or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size,
        is_master=False,
        timeout=timeout,
    )
    return dist.PrefixStore(f"trainstack/round-{round_}", store)


def _dev(device: torch.device) -> torch.device | None:
    return device if device.type == "cuda" else None


def shutdown(after_error: bool = False) -> None:
    """Destroy the process groups on a clean exit only. After an error (a peer died) the
    process is about to exit anyway, and destroying a broken gloo group under torchrun leaves
    the agent's store so that the restarted ranks hang connecting to each other."""
    if dist.is_initialized() and not after_error:
        dist.destroy_process_group()
