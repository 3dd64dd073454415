"""Scale features on this machine's CPU (issue 16): HSDP against full sharding, and the
activation-checkpointing choices against each other.

- hsdp: the real trainer on 4 gloo ranks, full sharding (1 x 4) and HSDP (2 x 2) launched
  alternately, ROUNDS each; medians of the logged steady-state `throughput/tokens_per_s`.
  On one CPU host both layouts share the same memory bus, so this shows HSDP's cost or
  gain in collectives only (shard groups of 2 all-gather less; the replica all-reduce is
  extra), not the inter-node saving it exists for.
- activation checkpointing: per choice (none, selective = every other block, full,
  selective_op = keep matmul outputs), one process builds the model through the trainer's
  `parallelize` on a 1-rank mesh; the choices' steps alternate (so load from other processes
  hits all alike) and forward+backward is the median of AC_STEPS. Memory is the bytes of
  the storages the forward created that are still alive when it returns — what is held for
  backward. (The CPU allocator keeps no peak statistics, and RSS growth hides reuse of
  pages glibc kept from the previous step.)

The AC worker runs as `python benchmarks/bench_parallel.py ac OUT_JSON`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RANKS, STEPS, WARMUP, ROUNDS = 4, 16, 4, 2
LAYOUTS = {"full_shard_1x4": [], "hsdp_2x2": ["trainer.parallel.dp_replicate=2"]}
AC_CHOICES = ("none", "selective", "full", "selective_op")
AC_STEPS = 3
AC_MODEL = dict(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_hidden_dim=768)
AC_BATCH, AC_SEQ = 2, 512


def run() -> dict:
    rates: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    with tempfile.TemporaryDirectory(prefix="bench_parallel_") as tmp:
        work = Path(tmp)
        for round_ in range(ROUNDS):
            names = list(LAYOUTS) if round_ % 2 == 0 else list(reversed(LAYOUTS))
            for name in names:
                rates[name].append(_trainer_tokens_per_s(work / f"{name}-{round_}", name))
        ac = _ac_worker(work)

    full, hsdp = (statistics.median(rates[name]) for name in LAYOUTS)
    none, op, whole = ac["none"], ac["selective_op"], ac["full"]
    op_memory = op["held_for_backward_mib"] / none["held_for_backward_mib"]
    op_time = op["step_s"] / whole["step_s"]
    return {
        "hsdp": {
            "tokens_per_s": {name: [round(r, 1) for r in values] for name, values in rates.items()},
            "ranks": RANKS,
            "model": "tiny, 8 x 128 tokens per rank per step",
        },
        "activation_checkpoint": {
            "per_choice": ac,
            "model": f"{AC_MODEL}, batch {AC_BATCH} x {AC_SEQ} tokens, 1 rank",
        },
        "checks": {
            "hsdp_2x2_vs_full_shard_1x4_tokens_per_s": _check(
                hsdp / full, ">= 0.8", hsdp / full >= 0.8
            ),
            "selective_op_vs_none_held_for_backward": _check(op_memory, "< 1.0", op_memory < 1.0),
            "selective_op_vs_full_ac_step_time": _check(op_time, "< 1.0", op_time < 1.0),
        },
    }


def _check(value: float, target: str, ok: bool) -> dict:
    return {"value": round(value, 3), "target": target, "ok": bool(ok)}


def _trainer_tokens_per_s(work: Path, layout: str) -> float:
    work.mkdir()
    config = work / "config.yaml"
    config.write_text(f"run_dir: {work / 'run'}\n")
    overrides = [
        f"trainer.max_steps={STEPS}",
        "trainer.log_interval=1",
        "trainer.eval_interval=0",
        "trainer.checkpoint.interval=0",
        "trainer.peak_tflops=0.1",
        *LAYOUTS[layout],
    ]
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={RANKS}", "-m", "trainer"]
    _run([*cmd, "--config", str(config), *overrides])
    lines = (work / "run/logs/metrics.jsonl").read_text().splitlines()
    rates = [json.loads(line)["throughput/tokens_per_s"] for line in lines]
    return statistics.median(rates[WARMUP:])


def _ac_worker(work: Path) -> dict:
    out = work / "ac.json"
    _run([str(BIN / "python"), __file__, "ac", str(out)])
    return json.loads(out.read_text())


def _run(cmd: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed:\n{proc.stderr[-3000:]}")


# ---- worker side ------------------------------------------------------------------------


def _held_for_backward_bytes(forward) -> tuple[object, int]:
    """Run `forward`; bytes of the distinct storages its ops created that are still alive
    when it returns: what the autograd graph (or a checkpoint's cache) holds for backward."""
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    created: list[weakref.ref] = []

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            created.extend(weakref.ref(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor))
            return out

    with Track():
        result = forward()
    storages = {}
    for ref in created:
        tensor = ref()
        if tensor is not None:
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return result, sum(storages.values())


def _ac_all() -> dict:
    import torch
    import torch.nn.functional as F

    from contract.model.args import MODEL_PRESETS
    from trainer.distributed import init_distributed, shutdown
    from trainer.model.model import Transformer
    from trainer.parallelize import parallelize

    env = init_distributed()
    args = replace(MODEL_PRESETS["tiny"], **AC_MODEL, max_seq_len=AC_SEQ)
    models = {}
    for choice in AC_CHOICES:
        with torch.device("meta"):
            model = Transformer(args)
        parallelize(
            model,
            env.mesh,
            mixed_precision="fp32",
            activation_checkpoint=choice,
            compile_blocks=False,
        )
        model.to_empty(device=env.device)
        model.init_weights(0)
        models[choice] = model
    tokens = torch.randint(0, args.vocab_size, (AC_BATCH, AC_SEQ + 1))

    def forward(model):
        logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    times: dict[str, list[float]] = {choice: [] for choice in AC_CHOICES}
    held: dict[str, int] = {}
    # Round 0 warms up and measures what is held (untimed: the tracking costs time); then the
    # choices alternate, one timed step each per round.
    for round_ in range(AC_STEPS + 1):
        for choice in AC_CHOICES:
            model = models[choice]
            started = time.perf_counter()
            if round_ == 0:
                loss, held[choice] = _held_for_backward_bytes(lambda m=model: forward(m))
            else:
                loss = forward(model)
            loss.backward()
            model.zero_grad(set_to_none=True)
            if round_:
                times[choice].append(time.perf_counter() - started)
    shutdown()
    return {
        choice: {
            "step_s": round(statistics.median(times[choice]), 3),
            "held_for_backward_mib": round(held[choice] / 2**20, 1),
        }
        for choice in AC_CHOICES
    }


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(_ac_all()))
