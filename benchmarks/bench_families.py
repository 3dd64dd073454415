"""Model families and LoRA (issue 26, section 5), on this machine's CPU.

- families: per family (llama, qwen2, qwen3, mistral), forward + backward tokens/s of the
  built-in trainer's model against transformers' model of the same random weights on the same
  batch, in one process (fp32, SDPA attention in both, one thread each): STEPS steps of each,
  interleaved one by one after a warm-up; each side's rate is its fastest step's (the least
  disturbed by other processes; the median steps' ratio is reported beside it). Target >= 1.0x.
- lora: the real trainer under torchrun (2 gloo ranks) fine-tuning the same ~130M-parameter
  Llama from model.init_from, full vs model.lora.rank=8 on the attention projections: peak RSS
  per rank (max over the run's logging windows, largest rank), the final checkpoint's bytes,
  and steady-state tokens/s (median over the steps after the first two). Targets: memory <=
  0.6x and checkpoint <= 0.1x of the full fine-tune's.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FAMILIES = ("llama", "qwen2", "qwen3", "mistral")
TINY = dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
            num_key_value_heads=4, vocab_size=2048, max_position_embeddings=512)  # fmt: skip
BATCH, SEQ = 4, 128
WARMUP, STEPS = 2, 30
LORA_MODEL = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                  max_position_embeddings=1024)  # fmt: skip
LORA_STEPS = 10


def run() -> dict:
    figures: dict = {"families": {}, "checks": {}}
    with tempfile.TemporaryDirectory(prefix="bench_families_") as tmp:
        for family in FAMILIES:
            result = _family_throughput(family, Path(tmp) / family)
            figures["families"][family] = result
            figures["checks"][f"{family} trainer/transformers tokens/s"] = {
                "value": result["ratio"], "target": ">= 1.0", "ok": result["ratio"] >= 1.0,
            }  # fmt: skip
        lora = _lora_vs_full(Path(tmp) / "lora")
    figures["lora"] = lora
    figures["checks"]["lora/full peak RSS per rank"] = {
        "value": lora["memory_ratio"], "target": "<= 0.6", "ok": lora["memory_ratio"] <= 0.6,
    }  # fmt: skip
    figures["checks"]["lora/full checkpoint bytes"] = {
        "value": lora["checkpoint_ratio"], "target": "<= 0.1",
        "ok": lora["checkpoint_ratio"] <= 0.1,
    }  # fmt: skip
    return figures


def _build(family: str, out: Path, sizes: dict) -> Path:
    import transformers

    from testing_support.hf_models import write_tokenizer

    names = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}[family]
    torch.manual_seed(0)
    config = getattr(transformers, f"{names}Config")(
        **sizes, tie_word_embeddings=family in ("qwen2", "qwen3"), rope_theta=10_000.0,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    model = getattr(transformers, f"{names}ForCausalLM")(config)
    model.save_pretrained(out)
    write_tokenizer(out, min(sizes["vocab_size"], 1000))
    return out


def _family_throughput(family: str, out: Path) -> dict:
    import torch.nn.functional as F

    # One thread each: on a shared CPU, waits between two threads' halves of an op are noise.
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM

    from contract.model.hf_config import model_args_from_hf
    from trainer.hf.config import read_hf_config
    from trainer.hf.weights import check_checkpoint, load_hf_weights, local_reader
    from trainer.model.model import Transformer

    source = _build(family, out, TINY)
    args = model_args_from_hf(read_hf_config(str(source)), str(source))
    ours = Transformer(args)
    load_hf_weights(ours, check_checkpoint(source, args), local_reader(source))
    theirs = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    ours.train()
    theirs.train()
    tokens = torch.randint(
        0, args.vocab_size, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(0)
    )
    inputs, labels = tokens[:, :-1], tokens[:, 1:]

    def ours_step() -> None:
        logits = ours(inputs)
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()

    def theirs_step() -> None:
        logits = theirs(inputs).logits
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()

    def seconds(step) -> float:
        started = time.perf_counter()
        step()
        return time.perf_counter() - started

    for _ in range(WARMUP):
        ours_step()
        theirs_step()
    # Steps interleaved one by one, each side's fastest kept: the least disturbed by the
    # other processes of a shared CPU, and both sides sample the same moments.
    ours_times, theirs_times = [], []
    for index in range(STEPS):
        first, second = (ours_step, theirs_step) if index % 2 == 0 else (theirs_step, ours_step)
        a, b = seconds(first), seconds(second)
        ours_times.append(a if first is ours_step else b)
        theirs_times.append(b if first is ours_step else a)
    tokens = BATCH * SEQ
    return {
        "params": args.num_params(),
        "trainer_tokens_per_s": round(tokens / min(ours_times)),
        "transformers_tokens_per_s": round(tokens / min(theirs_times)),
        "ratio": round(min(theirs_times) / min(ours_times), 3),
        "median_step_ratio": round(
            statistics.median(theirs_times) / statistics.median(ours_times), 3
        ),
    }


def _train(work: Path, source: Path, corpus: Path, name: str, *extra: str) -> dict:
    run_dir = work / name
    config = work / f"{name}.yaml"
    config.write_text(f"run_dir: {run_dir}\nseed: 0\n")
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", "-m", "trainer",
           "--config", str(config), f"model.init_from={source}", "model.name=null",
           f"data.path={corpus}", "data.seq_len=256", "trainer.micro_batch_size=2",
           f"trainer.max_steps={LORA_STEPS}", "trainer.warmup_steps=1",
           "trainer.log_interval=1", "trainer.eval_interval=0", "trainer.peak_tflops=0.1",
           *extra]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    rows = [json.loads(line) for line in (run_dir / "logs/metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    checkpoint = max((run_dir / "checkpoints").iterdir())
    return {
        "peak_rss_gib": round(max(r["memory/max_rss_gib"] for r in steps), 3),
        "checkpoint_bytes": sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file()),
        "tokens_per_s": round(statistics.median(r["throughput/tokens_per_s"] for r in steps[2:])),
    }


def _params(source: Path) -> int:
    from contract.model.hf_config import model_args_from_hf
    from trainer.hf.config import read_hf_config

    return model_args_from_hf(read_hf_config(str(source)), str(source)).num_params()


def _lora_vs_full(work: Path) -> dict:
    from testing_support.hf_models import word_corpus

    work.mkdir(parents=True)
    source = _build("llama", work / "hf", LORA_MODEL)
    corpus = word_corpus(work / "words.jsonl", docs=400)
    full = _train(work, source, corpus, "full")
    lora = _train(work, source, corpus, "lora", "model.lora.rank=8", "model.lora.alpha=16")
    return {
        "model_params": _params(source),
        "full": full,
        "lora": lora,
        "memory_ratio": round(lora["peak_rss_gib"] / full["peak_rss_gib"], 3),
        "checkpoint_ratio": round(lora["checkpoint_bytes"] / full["checkpoint_bytes"], 4),
        "tokens_per_s_ratio": round(lora["tokens_per_s"] / full["tokens_per_s"], 3),
    }
