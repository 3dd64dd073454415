"""One case of the GPU check, in its own process:
`python -m benchmarks.gpu.cases NAME --work DIR --mode gpu|smoke --result FILE`.

The orchestrator (`benchmarks.gpu.check`) starts one such process per case with a timeout; a
case writes its figures as JSON to FILE (with `problems`: what it found wrong, if anything),
or exits non-zero with its traceback on stderr. The
trainer itself runs as a user runs it — `python -m trainer`, `python -m trainer.launch` (the
pod's torchrun), `python -m trainer.runners.hf` — and the figures are read from what it wrote
(the run dir's logs/metrics.jsonl, its notes on stdout).

torch is imported inside the cases that compute with it: one that only launches the trainer
(the training rows, the resume) starts in a fraction of a second instead of several.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.gpu import fixtures
from benchmarks.gpu.plan import BY_NAME, GPU, SMOKE, TRAIN_ROWS, Sizes
from benchmarks.gpu.procs import kill_tree
from contract.checkpoints import MARKER, step_dir
from contract.gpu_peaks import gpu_peak_flops
from contract.model.args import ModelArgs

REPO = Path(__file__).resolve().parents[2]
TRAINER_TIMEOUT_S = 900  # the orchestrator's per-case timeout is the real bound
MEMORY_KEYS = ("memory/max_allocated_gib", "memory/max_reserved_gib", "memory/max_rss_gib")


@dataclass
class Context:
    work: Path
    sizes: Sizes
    smoke: bool


# ---- running the trainer ---------------------------------------------------------------------


@dataclass
class Run:
    returncode: int
    records: list[dict]
    stdout: str
    seconds: float
    killed: bool


def launch(
    ctx: Context,
    label: str,
    overrides: list[str],
    *,
    run_dir: Path | None = None,
    launcher: str = "trainer",
    stop_when: Callable[[Path], bool] | None = None,
) -> Run:
    """Run the trainer on `overrides` until it exits, or (with `stop_when(run_dir)`) until the
    condition holds, then SIGKILL it and every process under it (a lost node)."""
    run_dir = run_dir or ctx.work / "runs" / label
    logs = ctx.work / "logs" / f"{label}-{int(time.time() * 1000)}"
    logs.mkdir(parents=True)
    config = logs / "config.yaml"
    if launcher == "trainer.runners.hf":
        config.write_text(json.dumps(_nested(overrides, run_dir)))  # JSON is YAML
        command = [sys.executable, "-m", launcher, "--config", str(config)]
    else:
        config.write_text(f"run_dir: {run_dir}\nseed: 0\n")
        module = ["-m", "trainer", "--config", str(config), *overrides]
        command = [sys.executable, *module]
        if launcher == "trainer.launch":
            torchrun = ["--standalone", "--nproc_per_node=1"]
            command = [sys.executable, "-m", "trainer.launch", *torchrun, *module]
    print(f"[{label}] {' '.join(command)}", flush=True)  # where a timed-out case stood
    started = time.perf_counter()
    with (logs / "stdout.txt").open("w+") as out, (logs / "stderr.txt").open("w+") as err:
        proc = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=err, start_new_session=True, env=os.environ
        )
        killed = False
        try:
            while proc.poll() is None:
                if stop_when is not None and stop_when(run_dir):
                    kill_tree(proc)
                    killed = True
                    break
                if time.perf_counter() - started > TRAINER_TIMEOUT_S:
                    kill_tree(proc)
                    raise RuntimeError(f"{label}: no exit after {TRAINER_TIMEOUT_S}s")
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                kill_tree(proc)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode and not killed:
        raise RuntimeError(
            f"{label}: `{' '.join(command[1:4])} ...` exited {proc.returncode}\n"
            f"--- stderr (tail) ---\n{stderr[-6000:]}\n--- stdout (tail) ---\n{stdout[-2000:]}"
        )
    return Run(proc.returncode, _metrics(run_dir), stdout, seconds, killed)


def _metrics(run_dir: Path) -> list[dict]:
    """The run's metrics records; read while the trainer appends, so a last line still being
    written is left out."""
    path = run_dir / "logs" / "metrics.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


def _nested(overrides: list[str], run_dir: Path) -> dict:
    """`a.b=c` overrides as the nested mapping a runner=hf config file holds."""
    root: dict[str, Any] = {"run_dir": str(run_dir), "seed": 0}
    for override in overrides:
        key, value = override.split("=", 1)
        *parents, leaf = key.split(".")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = None if value == "null" else _number(value)
    return root


def _number(value: str) -> Any:
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(value)
    return {"true": True, "false": False}.get(value, value)


def common(ctx: Context, steps: int, *, log_interval: int | None = None) -> list[str]:
    s = ctx.sizes
    return [
        f"data.path={fixtures.synthetic_dataset(ctx.work, s)}",
        "data.tokenizer=byte",
        f"data.seq_len={s.seq_len}",
        f"trainer.micro_batch_size={s.micro_batch}",
        f"trainer.max_steps={steps}",
        f"trainer.log_interval={log_interval or s.log_interval}",
        "trainer.warmup_steps=2",
        "trainer.eval_interval=0",
        "trainer.checkpoint.interval=0",
    ]


def after_step(step: int) -> Callable[[Path], bool]:
    """True once the run logged `step` (its final checkpoint, tens of GB for the 1B model with
    its optimizer state, is then skipped: what is measured is the steps)."""

    def logged(run_dir: Path) -> bool:
        return any(r.get("step") == step and "loss" in r for r in _metrics(run_dir))

    return logged


def committed(step: int) -> Callable[[Path], bool]:
    return lambda run_dir: (run_dir / step_dir(step) / MARKER).is_file()


def throughput(run: Run, *, skip: int = 1) -> dict:
    """Medians over the training records after the first `skip` (start-up, compilation)."""
    train = [r for r in run.records if "throughput/tokens_per_s" in r]
    if not train:
        raise RuntimeError(f"no training records; stdout tail:\n{run.stdout[-3000:]}")
    steady = train[skip:] or train
    mfu = [r["mfu/percent"] for r in steady if r.get("mfu/percent") is not None]
    memory = {
        key.split("/")[1]: round(max(r[key] for r in train), 2)
        for key in MEMORY_KEYS
        if key in train[0]
    }
    return {
        "tokens_per_s": round(statistics.median(r["throughput/tokens_per_s"] for r in steady)),
        "first_window_tokens_per_s": round(train[0]["throughput/tokens_per_s"]),
        "mfu_percent": round(statistics.median(mfu), 2) if mfu else None,
        "mfu_peak_source": train[-1].get("mfu/peak_source"),
        "peak_memory_gib": memory,
        "step_phases_s": {  # where a step's time goes (trainer.step_timer), medians
            key.removeprefix("time/"): round(statistics.median(r[key] for r in steady), 4)
            for key in steady[0]
            if key.startswith("time/") and all(key in r for r in steady)
        },
        "steps_logged": train[-1]["step"],
        "last_loss": train[-1]["loss"],
        "wall_s": round(run.seconds, 1),
        "problems": [] if _finite(train[-1]["loss"]) else [f"loss {train[-1]['loss']!r}"],
    }


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def note_seconds(stdout: str, pattern: str) -> float | None:
    """Seconds from a trainer note, e.g. `checkpoint step 30 saved in 12.34s`."""
    found = re.search(pattern + r" in ([0-9.]+)s", stdout)
    return float(found.group(1)) if found else None


# ---- the cases -------------------------------------------------------------------------------


def environment(ctx: Context) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    name = torch.cuda.get_device_name() if cuda else platform.processor() or "cpu"
    known = gpu_peak_flops(name) if cuda else None
    return {
        "device": name,
        "cuda_available": cuda,
        "gpu_model": known[0] if known else None,
        "peak_bf16_tflops": known[1] / 1e12 if known else None,
        "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        if cuda
        else None,
        "precision": "bf16" if cuda else "fp32 (CPU: trainer.mixed_precision=auto)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": str(torch.cuda.nccl.version()) if cuda else None,
        **{dist: _version(dist) for dist in ("transformers", "peft", "accelerate")},
        "python": platform.python_version(),
        "nvidia_smi": _nvidia_smi() if cuda else None,
        "summary": f"{name}; torch {torch.__version__}",
    }


def _nvidia_smi() -> str | None:
    """Clocks and power limit: what an MFU figure depends on besides the code."""
    query = "name,driver_version,memory.total,clocks.max.sm,power.limit,temperature.gpu"
    try:
        found = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found.stdout.strip() or None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def row_overrides(ctx: Context, name: str) -> list[str]:
    compile_blocks, ac = TRAIN_ROWS[name]
    return [
        *common(ctx, ctx.sizes.steps),
        *ctx.sizes.big,
        f"trainer.compile={str(compile_blocks).lower()}",
        f"trainer.activation_checkpoint={ac}",
    ]


def train_row(ctx: Context, name: str) -> dict:
    """The built-in trainer on the ~1B Llama 3: one row of the compile x AC matrix."""
    overrides = row_overrides(ctx, name)
    run = launch(ctx, name.replace("/", "-"), overrides, stop_when=after_step(ctx.sizes.steps))
    figures = throughput(run)
    args = fixtures.args_from_overrides(ctx.sizes.big)
    figures["params_millions"] = round(args.num_params() / 1e6, 1)
    figures["summary"] = (
        f"{figures['tokens_per_s']} tok/s, MFU {figures['mfu_percent']}%, peak {_peak(figures)} GiB"
    )
    _remove(run_dir_of(ctx, name))
    return figures


def run_dir_of(ctx: Context, label: str) -> Path:
    return ctx.work / "runs" / label.replace("/", "-")


def _peak(figures: dict) -> float | None:
    memory = figures["peak_memory_gib"]
    return memory.get("max_allocated_gib", memory.get("max_rss_gib"))


def resume_overrides(ctx: Context) -> list[str]:
    s = ctx.sizes
    return [
        *common(ctx, s.resume_steps, log_interval=1),
        *_model_overrides(s.small_llama, s.small_overrides),
        f"trainer.checkpoint.interval={s.resume_steps // 2}",
    ]


def resume(ctx: Context) -> dict:
    """Checkpoint at the middle step, SIGKILL (every process, as when a node is lost), run the
    same command again: the losses after the checkpoint must equal an uninterrupted run's."""
    s = ctx.sizes
    half = s.resume_steps // 2
    args = fixtures.model_args(s.small_llama, s.small_overrides)
    overrides = resume_overrides(ctx)
    whole = launch(ctx, "resume-uninterrupted", overrides, launcher="trainer.launch")
    killed_dir = ctx.work / "runs" / "resume-killed"
    killed = launch(
        ctx,
        "resume-killed",
        overrides,
        run_dir=killed_dir,
        launcher="trainer.launch",
        stop_when=committed(half),
    )
    if not killed.killed:
        raise RuntimeError(f"the run ended (exit {killed.returncode}) before it could be killed")
    before_kill = _losses(killed.records)
    again = launch(ctx, "resume-resumed", overrides, run_dir=killed_dir, launcher="trainer.launch")
    if f"at step {half}" not in again.stdout:
        raise RuntimeError(f"the second run did not resume at step {half}:\n{again.stdout[-2000:]}")
    a, b = _losses(whole.records), _losses(again.records)
    after = range(half + 1, s.resume_steps + 1)
    first_half = [step for step in range(1, half + 1) if step in before_kill]
    same_after = all(a.get(t) == b.get(t) for t in after)
    same_before = all(a[t] == before_kill[t] for t in first_half)
    diff_after = max(abs(a[t] - b[t]) for t in after)
    if same_after:
        verdict = f"bit for bit at steps {half + 1}-{s.resume_steps}"
    elif not same_before:
        fresh = max(abs(a[t] - before_kill[t]) for t in first_half)
        verdict = (
            f"not bit for bit, and not because of the resume: two fresh runs already differ "
            f"before the checkpoint (steps 1-{half}, by up to {fresh:.3g}), so this device's "
            f"kernels are not run-to-run deterministic here; after the resume the losses "
            f"differ by up to {diff_after:.3g}"
        )
    else:
        first = next(t for t in after if a.get(t) != b.get(t))
        verdict = (
            f"RESUME DIFFERS: fresh runs agree before the checkpoint, but step {first} "
            f"differs ({a[first]!r} vs {b[first]!r})"
        )
    _remove(ctx.work / "runs")
    return {
        "model": f"{s.small_llama} ({args.num_params() / 1e6:.1f}M params)",
        "bit_for_bit_after_resume": same_after,
        "fresh_runs_equal_before_checkpoint": same_before,
        "max_abs_diff_after_resume": diff_after,
        "losses_uninterrupted": [a[t] for t in after],
        "losses_resumed": [b.get(t) for t in after],
        "checkpoint_save_s": note_seconds(whole.stdout, rf"checkpoint step {half} saved"),
        "verdict": verdict,
        "summary": verdict[:80],
        "problems": [verdict] if verdict.startswith("RESUME DIFFERS") else [],
    }


def _losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def _model_overrides(preset: str, fields: dict[str, int]) -> list[str]:
    return [f"model.name={preset}", *(f"model.{k}={v}" for k, v in fields.items())]


def lora_overrides(ctx: Context, base: Path) -> list[str]:
    return [
        *common(ctx, ctx.sizes.steps),
        "model.name=null",
        f"model.init_from={base}",
        "model.lora.rank=16",
        "model.lora.alpha=32",
    ]


def lora(ctx: Context) -> dict:
    """LoRA rank 16 over the same ~1B model, from a Hugging Face checkpoint of it."""
    s = ctx.sizes
    args = fixtures.args_from_overrides(s.big)
    # bf16 on a GPU, as a real 1B checkpoint is shipped; the CPU form keeps fp32
    base = fixtures.hf_checkpoint(ctx.work, "llama_1b", args, dtype="fp32" if ctx.smoke else "bf16")
    run = launch(ctx, "lora", lora_overrides(ctx, base))
    figures = throughput(run)
    figures["summary"] = f"{figures['tokens_per_s']} tok/s, peak {_peak(figures)} GiB"
    _remove(run_dir_of(ctx, "lora"))
    return figures


def init_from_overrides(ctx: Context, source: Path, steps: int) -> list[str]:
    """A run from a Hugging Face checkpoint (its config.json gives the architecture)."""
    return [
        *common(ctx, steps, log_interval=1),
        "model.name=null",
        f"model.init_from={source}",
    ]


def hf_runner(ctx: Context) -> dict:
    """runner=hf (transformers.Trainer) and the built-in trainer on one small Llama checkpoint,
    same data, sequence length, batch and steps."""
    s = ctx.sizes
    args = fixtures.model_args(s.small_llama, s.small_overrides)
    source = fixtures.hf_checkpoint(ctx.work, "small_llama", args, dtype="fp32")
    overrides = init_from_overrides(ctx, source, s.hf_steps)
    hf = launch(ctx, "hf-runner", [*overrides, "runner.peft.r=0"], launcher="trainer.runners.hf")
    ours = launch(ctx, "hf-builtin", overrides, stop_when=after_step(s.hf_steps))
    skip = min(3, s.hf_steps - 1)
    theirs, built_in = throughput(hf, skip=skip), throughput(ours, skip=skip)
    ratio = built_in["tokens_per_s"] / theirs["tokens_per_s"]
    _remove(ctx.work / "runs")
    return {
        "model": f"{s.small_llama} ({args.num_params() / 1e6:.1f}M params)",
        "runner_hf": theirs,
        "built_in": built_in,
        "built_in_vs_hf_tokens_per_s": round(ratio, 2),
        "problems": [*theirs.pop("problems"), *built_in.pop("problems")],
        "summary": (
            f"hf {theirs['tokens_per_s']} vs built-in {built_in['tokens_per_s']} tok/s "
            f"(x{ratio:.2f})"
        ),
    }


FAMILY_PRESETS = {"qwen3": "qwen3_0_6b", "mistral": "mistral_7b"}


def family_args(ctx: Context, name: str) -> tuple[str, dict[str, int], ModelArgs]:
    """(preset, the fields changed in it, the architecture) of a family's checkpoint."""
    preset = FAMILY_PRESETS[name]
    fields = dict(ctx.sizes.family_overrides)
    if name == "mistral":
        fields["sliding_window"] = ctx.sizes.sliding_window
    return preset, fields, fixtures.model_args(preset, fields)


def family(ctx: Context, name: str) -> dict:
    """One trainer step from a random checkpoint of the family, then the trainer's bf16 logits
    against transformers' (bf16, and fp32 as the reference both are measured from)."""
    s = ctx.sizes
    preset, fields, args = family_args(ctx, name)
    source = fixtures.hf_checkpoint(ctx.work, name, args, dtype="fp32", distinct_norms=True)
    overrides = init_from_overrides(ctx, source, 1)
    run = launch(ctx, f"family-{name}", overrides, stop_when=after_step(1))
    step = _losses(run.records)
    _remove(ctx.work / "runs")
    logits = compare_logits(source, s.logits_batch)
    ok = logits["ours_vs_fp32"] <= logits["tolerance"]
    return {
        "model": f"{preset} with {fields} ({args.num_params() / 1e6:.1f}M params)",
        "step_1_loss": step.get(1),
        **logits,
        "within_bf16_tolerance": ok,
        "problems": [
            *([] if _finite(step.get(1)) else [f"{name}: step 1 loss {step.get(1)!r}"]),
            *([] if ok else [f"{name}: logits beyond bf16 tolerance ({logits})"]),
        ],
        "summary": (
            f"loss {step.get(1)}; logits err {logits['ours_vs_fp32']:.2e} "
            f"(hf bf16 {logits['hf_bf16_vs_fp32']:.2e}) {'ok' if ok else 'TOO FAR'}"
        ),
    }


def compare_logits(source: Path, batch: tuple[int, int]) -> dict:
    """Max errors relative to the largest reference logit. Tolerance: twice transformers' own
    bf16 error plus one bf16 rounding step (2**-8): the trainer computes in bf16 too, through
    other kernels, so its error may be of the same size but not much larger."""
    import torch
    from transformers import AutoModelForCausalLM

    from contract.model.hf_config import model_args_from_hf
    from trainer.distributed import init_distributed, shutdown
    from trainer.hf.config import read_hf_config
    from trainer.hf.load import load_init_from
    from trainer.model.model import Transformer
    from trainer.parallelize import parallelize

    dev = fixtures.device()
    args = model_args_from_hf(read_hf_config(str(source)), str(source))
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, args.vocab_size, batch, generator=generator).to(dev)
    env = init_distributed()
    try:
        with torch.device("meta"):
            model = Transformer(args)
        parallelize(
            model, env.mesh, mixed_precision="bf16", activation_checkpoint="none",
            compile_blocks=False,
        )  # fmt: skip
        model.to_empty(device=env.device)
        load_init_from(model, str(source), args, env)
        model.init_rope()
        model.eval()
        with torch.no_grad():
            ours = model(tokens).float()
        del model
    finally:
        shutdown()
    theirs = {}
    for dtype in (torch.bfloat16, torch.float32):
        hf = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(dev).eval()
        with torch.no_grad():
            theirs[dtype] = hf(tokens).logits.float()
        del hf
    reference = theirs[torch.float32]
    scale = reference.abs().max()

    def error(x: torch.Tensor) -> float:
        return ((x - reference).abs().max() / scale).item()

    hf_error = error(theirs[torch.bfloat16])
    return {
        "batch": list(batch),
        "ours_vs_fp32": error(ours),
        "hf_bf16_vs_fp32": hf_error,
        "ours_vs_hf_bf16": ((ours - theirs[torch.bfloat16]).abs().max() / scale).item(),
        "top1_agreement_ours": (ours.argmax(-1) == reference.argmax(-1)).float().mean().item(),
        "top1_agreement_hf_bf16": (
            (theirs[torch.bfloat16].argmax(-1) == reference.argmax(-1)).float().mean().item()
        ),
        "tolerance": 2 * hf_error + 2**-8,
    }


def _remove(path: Path) -> None:
    """Run dirs go as soon as a case is done: the 1B model's checkpoints are tens of GB."""
    shutil.rmtree(path, ignore_errors=True)


def dispatch(name: str) -> Callable[[Context], dict]:
    if name in TRAIN_ROWS:
        return lambda ctx: train_row(ctx, name)
    if name.startswith("family/"):
        return lambda ctx: family(ctx, name.split("/", 1)[1])
    return {"environment": environment, "resume": resume, "lora": lora, "hf_runner": hf_runner}[
        name
    ]


FAULT_ENV = "TRAINSTACK_GPU_CHECK_FAULT"
"""Tests only: `<case>=fail` raises in that case, `<case>=hang` starts a child that sleeps and
hangs (what a stuck collective looks like): the orchestrator must record the first, time out
the second and end both processes."""


def planted_fault(name: str, work: Path) -> None:
    faults = dict(f.split("=", 1) for f in os.environ.get(FAULT_ENV, "").split(",") if "=" in f)
    fault = faults.get(name)
    if fault == "fail":
        raise RuntimeError(f"planted failure in {name} ({FAULT_ENV})")
    if fault == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (work / "hung-child.pid").write_text(str(child.pid))
        time.sleep(600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu.cases")
    parser.add_argument("name", choices=list(BY_NAME))
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--mode", choices=("gpu", "smoke"), required=True)
    parser.add_argument("--result", required=True, type=Path)
    options = parser.parse_args(argv)
    smoke = options.mode == "smoke"
    ctx = Context(options.work, SMOKE if smoke else GPU, smoke)
    try:
        planted_fault(options.name, options.work)
        figures = dispatch(options.name)(ctx)
    except Exception:
        traceback.print_exc()
        return 1
    options.result.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
