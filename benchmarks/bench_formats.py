"""Instruction-data cost (issue 9, section 5): loss masking and document masking against
`data.format=text` on the same data, on this machine's CPU with 2 gloo ranks.

The data: pairs of consecutive verses of the sample corpus (short documents, as instruction
data is: a few per 128-token sequence). `text` trains on each pair as one document;
`prompt_completion` on the same pairs as prompt + completion, so every sequence also carries
a loss mask, per-document RoPE positions and a document-causal attention mask, and the step
all-reduces its target count. `text_before` is the step as it was before data.format existed
(mean cross-entropy per micro batch, plain batches) on the `text` batches: `text` against it
shows the text path did not get slower.

One torchrun launch, the trainer's own components (`TrainBatches`, `_train_step`, FSDP2 tiny
model, AdamW) — one model per kind, the kinds interleaved step by step (order rotating), so
load from other processes on this shared machine hits every kind alike. Step times include
batch assembly; all tokens count in tokens/s. The checks compare kinds pairwise within each
round (steps run back to back) and take the median of those ratios, which cancels the load
drifting over the run; tokens/s from the median step time are reported beside them.

The worker runs as `torchrun ... benchmarks/bench_formats.py WORK_DIR OUT_JSON`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NPROC = 2
STEPS, WARMUP = 32, 4
SEQ_LEN, MICRO_BATCH = 128, 8  # the default job's shape (model `tiny`)
PAIRS = 4000
KINDS = ("text_before", "text", "prompt_completion")


def run() -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_formats_") as tmp:
        work = Path(tmp)
        stats = _write_data(work)
        out = work / "result.json"
        cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={NPROC}", __file__]
        proc = subprocess.run(
            [*cmd, str(work), str(out)], cwd=REPO, capture_output=True, text=True, timeout=900
        )
        if proc.returncode:
            raise RuntimeError(f"bench_formats worker failed:\n{proc.stderr[-3000:]}")
        result = json.loads(out.read_text())

    times = result["step_s"]
    medians = {kind: statistics.median(values[WARMUP:]) for kind, values in times.items()}
    masked_vs_text = _paired_speed(times["prompt_completion"], times["text"])
    text_vs_before = _paired_speed(times["text"], times["text_before"])
    return {
        "tokens_per_s": {k: round(result["tokens_per_step"] / v, 1) for k, v in medians.items()},
        "step_s_median": {kind: round(value, 4) for kind, value in medians.items()},
        "targets_fraction": result["targets_fraction"],
        "data": stats,
        "shape": f"{NPROC} ranks x {MICRO_BATCH} x {SEQ_LEN} tokens, model tiny, {STEPS} steps",
        "checks": {
            "prompt_completion_vs_text_tokens_per_s": _check(masked_vs_text, 0.90),
            "text_vs_text_before_tokens_per_s": _check(text_vs_before, 0.97),
        },
    }


def _paired_speed(kind: list[float], reference: list[float]) -> float:
    """Median over the rounds after warm-up of kind's speed relative to the reference's."""
    return statistics.median(r / k for k, r in zip(kind[WARMUP:], reference[WARMUP:], strict=True))


def _check(value: float, at_least: float) -> dict:
    return {"value": round(value, 3), "target": f">= {at_least}", "ok": value >= at_least}


def _write_data(work: Path) -> dict:
    texts = [json.loads(line)["text"] for line in (REPO / "data/sample/train.jsonl").open()]
    verses = [v.strip() for text in texts for v in text.split("\n") if v.strip()]
    pairs = list(zip(verses[0::2], verses[1::2], strict=False))[:PAIRS]
    with (work / "text.jsonl").open("w") as text_out, (work / "pc.jsonl").open("w") as pc_out:
        for prompt, completion in pairs:
            text_out.write(json.dumps({"text": f"{prompt} {completion}"}) + "\n")
            pc_out.write(json.dumps({"prompt": prompt, "completion": f" {completion}"}) + "\n")
    mean_tokens = statistics.mean(len(f"{p} {c}".encode()) + 1 for p, c in pairs)
    return {"documents": len(pairs), "mean_document_tokens": round(mean_tokens, 1)}


# ---- worker side: runs under torchrun ------------------------------------------------------


def _worker(work: Path, out: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from contract.config import DataConfig
    from contract.model.args import MODEL_PRESETS
    from contract.plan import Plan
    from trainer.data import IGNORE_INDEX, PackedSequences, TrainBatches, load_corpus
    from trainer.distributed import init_distributed, shutdown
    from trainer.model.model import Transformer
    from trainer.parallelize import parallelize
    from trainer.tokenizer import ByteTokenizer
    from trainer.train import _train_step

    env = init_distributed()
    args = MODEL_PRESETS["tiny"]
    plan = Plan(args, env.world_size, MICRO_BATCH, 1, MICRO_BATCH * env.world_size, SEQ_LEN)

    def text_before(model, micro, device, _plan) -> None:
        """The step before data.format: mean cross-entropy of each (unmasked) micro batch."""
        for batch in micro:
            logits = model(batch.inputs.to(device))
            loss = F.cross_entropy(logits.flatten(0, 1).float(), batch.labels.to(device).flatten())
            (loss / len(micro)).backward()

    data = {"text": ("text.jsonl", "text"), "prompt_completion": ("pc.jsonl", "prompt_completion")}
    parts, targets = {}, {}
    for kind in KINDS:
        path, form = data["text" if kind == "text_before" else kind]
        cfg = DataConfig(path=str(work / path), format=form, seq_len=SEQ_LEN, eval_fraction=0)
        sequences = PackedSequences(load_corpus(cfg, ByteTokenizer()).train, SEQ_LEN)
        batches = TrainBatches(sequences, seed=0, dp_rank=env.rank, dp_size=env.world_size)
        with torch.device("meta"):
            model = Transformer(args)
        parallelize(model, env.mesh, mixed_precision="auto", activation_checkpoint="none",
                    compile_blocks=False)  # fmt: skip
        model.to_empty(device=env.device)
        model.init_weights(0)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        step = text_before if kind == "text_before" else _train_step
        parts[kind] = (batches, model, optimizer, step)
        sample = batches.micro_batches(0, 64, 1)[0].labels
        targets[kind] = round(float((sample != IGNORE_INDEX).float().mean()), 3)

    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for index in range(STEPS):
        shift = index % len(KINDS)
        for kind in KINDS[shift:] + KINDS[:shift]:
            batches, model, optimizer, step = parts[kind]
            dist.barrier()
            started = time.perf_counter()
            micro = batches.micro_batches(index * plan.global_batch_size, MICRO_BATCH, 1)
            step(model, micro, env.device, plan)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times[kind].append(time.perf_counter() - started)

    if env.is_main:
        result = {"step_s": times, "tokens_per_step": plan.tokens_per_step}
        result["targets_fraction"] = targets
        out.write_text(json.dumps(result))
    shutdown()


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), Path(sys.argv[2]))
