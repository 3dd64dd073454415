"""Two logging windows of `window_peak_memory` on however many ranks torchrun gives: in the
first, the last rank alone holds an extra BIG_MIB buffer; in the second, nobody does.
`torchrun --nproc_per_node=N tests/trainer/memory_worker.py OUT_DIR` writes rank<R>.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from trainer.distributed import init_distributed, shutdown
from trainer.memory import peak_memory, reset_peak_memory, window_peak_memory

BIG_MIB = 400


def main(out_dir: str) -> None:
    env = init_distributed()
    device = env.device
    reset_peak_memory(device)
    if env.rank == env.world_size - 1:
        big = torch.ones(BIG_MIB * 2**20 // 4)  # touched, so resident
        del big
    own_first = peak_memory(device)
    first = window_peak_memory(device)
    second = window_peak_memory(device)
    result = {"own_first": own_first, "first": first, "second": second}
    Path(out_dir, f"rank{env.rank}.json").write_text(json.dumps(result))
    shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
