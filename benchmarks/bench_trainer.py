"""Trainer benchmark (issue 2, section 4), on this machine's CPU with 2 gloo ranks.

- throughput: the trainer's tokens/s against torchtitan's train step reduced to a bare FSDP2
  loop (same model, batch, sequence length, steps and ranks; random tokens; zero_grad,
  forward, cross-entropy, backward, grad-norm clipping, AdamW, LR scheduler — nothing else) —
  launched alternately, three times each, so load from other processes hits both alike;
  medians over the steady-state steps and over the launches. torchtitan itself does not run
  here: torchtitan 0.3.0 (the newest on PyPI, installable beside torch 2.13.0 CPU once triton
  is added, which it imports unconditionally) sets the CUDA device in `Trainer.__init__`
  (`device_module.set_device`, with `device_type` "cuda" when no accelerator is found), which
  a CPU build of torch cannot do: `module 'torch._C' has no attribute '_cuda_setDevice'`.
- memory: bytes of the local shards of parameters + gradients + AdamW state after one step of
  a 55M-parameter model, at 2 ranks (the larger rank) over 1 rank.
- checkpoint: the trainer's synchronous DCP save (shards, fsync, commit marker) against a raw
  sequential write + fsync of the same number of bytes to the same directory; then an async
  save, whose loop stall (the time `save` blocks the loop, plus the commit) is compared with
  the synchronous save time — the steady-state stall of a run's second async save (the first
  also allocates the staging copy; reported as `async_stall_first_s`).

Workers run under torchrun as `python benchmarks/bench_trainer.py MODE OUT_JSON`.
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
NPROC = 2
STEPS, WARMUP = 24, 6
ROUNDS = 3  # alternating launches of each loop
SEQ_LEN, MICRO_BATCH = 128, 8  # the default job's shape (model `tiny`)
# >= 50M parameters, odd enough that shards are uneven.
BIG_MODEL = dict(dim=640, n_layers=12, n_heads=10, n_kv_heads=5, ffn_hidden_dim=1728)


def run() -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        work = Path(tmp)
        trainer_rates, bare_rates = [], []
        for round_ in range(ROUNDS):
            order = ("bare", "trainer") if round_ % 2 == 0 else ("trainer", "bare")
            for kind in order:
                if kind == "trainer":
                    trainer_rates.append(_trainer_tokens_per_s(work / f"run{round_}"))
                else:
                    bare_rates.append(_worker(NPROC, "bare", work)["tokens_per_s"])
        one = _worker(1, "memory", work)
        two = _worker(NPROC, "memory", work)
        ckpt = _worker(NPROC, "checkpoint", work)

    # Each round's two launches ran back to back: the median of their ratios follows the
    # machine's load (other processes) less than a ratio of two medians would.
    ratio = statistics.median(t / b for t, b in zip(trainer_rates, bare_rates, strict=True))
    mem_ratio = two["state_bytes"] / one["state_bytes"]
    save_ratio = ckpt["dcp_bytes_per_s"] / ckpt["raw_bytes_per_s"]
    stall_ratio = ckpt["async_stall_s"] / ckpt["sync_save_s"]
    return {
        "throughput": {
            "trainer_tokens_per_s": [round(r, 1) for r in trainer_rates],
            "torchtitan_step_tokens_per_s": [round(r, 1) for r in bare_rates],
            "ranks": NPROC,
            "batch": f"{MICRO_BATCH} x {SEQ_LEN} tokens per rank, model tiny",
        },
        "memory": {
            "model_params": one["params"],
            "state_bytes_1_rank": one["state_bytes"],
            "state_bytes_2_ranks_max": two["state_bytes"],
        },
        "checkpoint": ckpt,
        "checks": {
            "trainer_vs_torchtitan_step_tokens_per_s": _check(ratio, ">= 1.0", ratio >= 1.0),
            "state_memory_2_ranks_vs_1": _check(mem_ratio, "<= 0.55", mem_ratio <= 0.55),
            "model_params_millions": _check(one["params"] / 1e6, ">= 50", one["params"] >= 50e6),
            "sync_save_vs_raw_write_speed": _check(save_ratio, ">= 0.5", save_ratio >= 0.5),
            "async_stall_vs_sync_save_time": _check(stall_ratio, "<= 0.25", stall_ratio <= 0.25),
        },
    }


def _check(value: float, target: str, ok: bool) -> dict:
    return {"value": round(value, 3), "target": target, "ok": bool(ok)}


def _trainer_tokens_per_s(work: Path) -> float:
    """Median tokens/s of the real trainer's steady-state steps (every step logged)."""
    work.mkdir()
    config = work / "config.yaml"
    config.write_text(f"run_dir: {work / 'run'}\n")
    overrides = [
        f"trainer.max_steps={STEPS}",
        f"data.seq_len={SEQ_LEN}",
        f"trainer.micro_batch_size={MICRO_BATCH}",
        "trainer.log_interval=1",
        "trainer.eval_interval=0",
        "trainer.checkpoint.interval=0",
        "trainer.peak_tflops=0.1",
    ]
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={NPROC}", "-m", "trainer"]
    _run([*cmd, "--config", str(config), *overrides])
    lines = (work / "run/logs/metrics.jsonl").read_text().splitlines()
    rates = [json.loads(line)["throughput/tokens_per_s"] for line in lines]
    return statistics.median(rates[WARMUP:])


def _worker(nproc: int, mode: str, work: Path) -> dict:
    out = work / f"{mode}-{nproc}.json"
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={nproc}", __file__]
    _run([*cmd, mode, str(out)])
    return json.loads(out.read_text())


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed:\n{proc.stderr[-3000:]}")


# ---- worker side: runs under torchrun ------------------------------------------------------


def _build(model_overrides: dict, env):
    import torch

    from contract.model.args import MODEL_PRESETS
    from trainer.model.model import Transformer
    from trainer.parallelize import parallelize

    with torch.device("meta"):
        model = Transformer(replace(MODEL_PRESETS["tiny"], **model_overrides))
    parallelize(
        model, env.mesh, mixed_precision="auto", activation_checkpoint="none", compile_blocks=False
    )
    model.to_empty(device=env.device)
    model.init_weights(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    return model, optimizer


def _forward_backward(model, tokens) -> None:
    import torch.nn.functional as F

    logits = model(tokens[:, :-1])
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()


def _step(model, optimizer, tokens) -> None:
    _forward_backward(model, tokens)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _bare(env) -> dict:
    """torchtitan's train step with nothing around it: the same model and batch; per step
    zero_grad, forward, cross-entropy, backward, grad-norm clipping at 1.0 (the same
    `get_total_norm` + `full_tensor` + `clip_grads_with_norm_` as torchtitan's
    `dist_utils.clip_grad_norm_`), AdamW step, LR scheduler step. No data pipeline, metrics
    or checks. The clock runs over the whole loop body, batch creation included."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.optim.lr_scheduler import LambdaLR

    model, optimizer = _build({}, env)
    scheduler = LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 10))
    params = list(model.parameters())
    vocab = model.args.vocab_size
    generator = torch.Generator().manual_seed(env.rank)
    times = []
    for _ in range(STEPS):
        started = time.perf_counter()
        tokens = torch.randint(0, vocab, (MICRO_BATCH, SEQ_LEN + 1), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        _forward_backward(model, tokens)
        norm = torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, 1.0, norm, foreach=True)
        optimizer.step()
        scheduler.step()
        times.append(time.perf_counter() - started)
    step_time = statistics.median(times[WARMUP:])
    return {"tokens_per_s": MICRO_BATCH * SEQ_LEN * env.world_size / step_time}


def _local_bytes(tensor) -> int:
    from torch.distributed.tensor import DTensor

    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def _trained_big_model(env):
    """The 55M model after one optimizer step, its gradients still held (as at a step's end)."""
    import torch
    import torch.nn.functional as F

    model, optimizer = _build(BIG_MODEL, env)
    tokens = torch.randint(0, model.args.vocab_size, (1, 17))
    logits = model(tokens[:, :-1])
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    optimizer.step()
    return model, optimizer


def _memory(env) -> dict:
    import torch
    import torch.distributed as dist

    model, optimizer = _trained_big_model(env)
    params = list(model.parameters())
    param_bytes = sum(_local_bytes(p) for p in params)
    grad_bytes = sum(_local_bytes(p.grad) for p in params if p.grad is not None)
    optim_bytes = sum(_local_bytes(v) for state in optimizer.state.values() for v in state.values())
    total = torch.tensor([param_bytes + grad_bytes + optim_bytes], dtype=torch.float64)
    dist.all_reduce(total, op=dist.ReduceOp.MAX)
    return {"state_bytes": int(total.item()), "params": model.args.num_params()}


def _checkpoint(env) -> dict:
    import torch
    import torch.distributed as dist

    from contract.checkpoints import step_dir
    from contract.config import CheckpointConfig
    from trainer.checkpoint import Checkpointer
    from trainer.storage import open_run_storage

    model, optimizer = _trained_big_model(env)
    base = Path(tempfile.mkdtemp(prefix="bench_trainer_ckpt_")) if env.is_main else None
    shared = [str(base) if base else None]
    dist.broadcast_object_list(shared, src=0)
    root = Path(shared[0])
    storage = open_run_storage(str(root / "run"))
    checkpointer = Checkpointer(storage, env, CheckpointConfig(keep=10))

    def state():
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def timed(fn) -> float:
        env.barrier()
        started = time.perf_counter()
        fn()
        env.barrier()
        return time.perf_counter() - started

    sync_s = timed(lambda: checkpointer.save(1, state(), asynchronous=False))
    ckpt_dir = root / "run" / step_dir(1)
    nbytes = sum(f.stat().st_size for f in ckpt_dir.iterdir())

    raw_s = timed(lambda: _raw_write(root / "raw.bin", nbytes) if env.is_main else None)

    # Async: the loop is blocked only by `save` (staging a copy) and by the commit. The first
    # async save of a run also allocates the staging copy; later ones reuse it.
    tokens = torch.randint(0, model.args.vocab_size, (1, 17))
    stalls, steps_during = [], []
    for step in (2, 3):
        env.barrier()
        started = time.perf_counter()
        checkpointer.save(step, state(), asynchronous=True)
        stall = time.perf_counter() - started
        steps = 0
        while not checkpointer.pending_done():
            _step(model, optimizer, tokens)
            steps += 1
        started = time.perf_counter()
        checkpointer.wait()
        stall += time.perf_counter() - started
        worst = torch.tensor([stall])
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        stalls.append(worst.item())
        steps_during.append(steps)
    checkpointer.close()
    committed = all((root / "run" / step_dir(s) / "COMMITTED").exists() for s in (1, 2, 3))
    if env.is_main:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return {
        "bytes": nbytes,
        "sync_save_s": round(sync_s, 3),
        "raw_write_s": round(raw_s, 3),
        "dcp_bytes_per_s": nbytes / sync_s,
        "raw_bytes_per_s": nbytes / raw_s,
        "async_stall_first_s": round(stalls[0], 3),
        "async_stall_s": round(stalls[1], 3),
        "steps_during_async_write": steps_during,
        "all_committed": committed,
    }


def _raw_write(path: Path, nbytes: int, chunk: int = 8 << 20) -> None:
    block = os.urandom(chunk)
    with path.open("wb") as f:
        written = 0
        while written < nbytes:
            f.write(block[: min(chunk, nbytes - written)])
            written += chunk
        f.flush()
        os.fsync(f.fileno())


def _worker_main(mode: str, out: str) -> None:
    from trainer.distributed import init_distributed, shutdown

    env = init_distributed()
    result = {"bare": _bare, "memory": _memory, "checkpoint": _checkpoint}[mode](env)
    if env.is_main:
        Path(out).write_text(json.dumps(result))
    shutdown()


if __name__ == "__main__":
    _worker_main(sys.argv[1], sys.argv[2])
