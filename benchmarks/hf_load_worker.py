"""One rank of the load benchmark: `torchrun --nproc_per_node=N -m benchmarks.hf_load_worker
SOURCE OUT_JSON [CHECKPOINT_DIR]`. Builds the model from SOURCE's config.json on meta, shards
it, loads the weights (model.init_from's loader) and reports its RSS rise and time; rank 0
writes everyone's figures. With CHECKPOINT_DIR the loaded model is also saved there as a
committed DCP checkpoint (the export benchmark's input)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from contract.model.hf_config import model_args_from_hf
from trainer.distributed import init_distributed, shutdown
from trainer.hf.config import read_hf_config
from trainer.hf.load import load_init_from
from trainer.model.model import Transformer
from trainer.parallelize import parallelize


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise KeyError(field)


def main(source: str, out: str, checkpoint: str | None = None) -> None:
    args = model_args_from_hf(read_hf_config(source), source)
    env = init_distributed()
    with torch.device("meta"):
        model = Transformer(args)
    parallelize(model, env.mesh, mixed_precision="fp32", activation_checkpoint="none",
                compile_blocks=False)  # fmt: skip
    model.to_empty(device=env.device)
    dist.barrier()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    read = load_init_from(model, source, args, env)
    seconds = time.perf_counter() - started
    rise = (_status_kib("VmHWM") - before) * 1024
    figures: list = [None] * env.world_size
    dist.all_gather_object(figures, {"rank": env.rank, "seconds": seconds, "rss_rise": rise,
                                     "bytes_read": read})  # fmt: skip
    if checkpoint:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=checkpoint)
        dist.barrier()
        if env.is_main:
            (Path(checkpoint) / "COMMITTED").write_text("1\n")
    if env.is_main:
        Path(out).write_text(json.dumps(figures))
    shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
