"""`data prepare` throughput (issue 10, section 5): the whole prepare (read JSONL, parse,
tokenize in worker processes, split eval, write uint16 shards and the manifest) against the
tokenizer's own batch encoding (`tokenizers.Tokenizer.encode_batch`, its Rust thread pool on
every core) of the same texts already in memory. Target: prepare >= 0.8x its throughput, i.e.
reading, masking and writing add at most 25%.

The tokenizer is a byte-level BPE (8k vocabulary) trained here with `tokenizers` on part of a
synthetic corpus of Zipf-distributed words (~16 MB of JSONL; nothing is downloaded). Each side
runs in its own process (prepare sets TOKENIZERS_PARALLELISM=false for its workers; the
baseline keeps the library's default), back to back in each of ROUNDS rounds; the check takes
the median of the per-round ratios, which cancels load from other processes drifting over the
run on this shared machine.

Worker mode: `python benchmarks/bench_data_prepare.py {baseline|prepare} WORK_DIR`.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS_MB = 16
VOCAB = 8192
ROUNDS = 3
TARGET = 0.8


def _write_corpus(work: Path) -> int:
    import numpy as np

    rng = np.random.default_rng(0)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(20_000)]
    ranks = np.arange(1, len(words) + 1)
    weights = 1 / ranks / (1 / ranks).sum()
    path, written = work / "corpus.jsonl", 0
    with path.open("w") as out:
        while written < CORPUS_MB << 20:
            picks = rng.choice(len(words), size=(500, 120), p=weights)
            lengths = rng.integers(20, 120, size=500)
            for row, length in zip(picks, lengths, strict=True):
                line = json.dumps({"text": " ".join(words[i] for i in row[:length]) + "."})
                out.write(line + "\n")
                written += len(line) + 1
    return written


def _train_tokenizer(work: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    with (work / "corpus.jsonl").open() as lines:
        sample = [json.loads(line)["text"] for line in itertools.islice(lines, 10_000)]
    tokenizer.train_from_iterator(sample, trainer)
    directory = work / "tokenizer"
    directory.mkdir()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    return directory


def _measure(kind: str, work: Path) -> dict:
    if kind == "baseline":
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(work / "tokenizer/tokenizer.json"))
        with (work / "corpus.jsonl").open() as lines:
            texts = [json.loads(line)["text"] for line in lines]
        start = time.perf_counter()
        encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "tokens": sum(len(e.ids) for e in encoded)}
    import shutil

    from contract.config import DataConfig
    from trainer.data.prepare import PrepareRequest, prepare

    out = work / "prepared"
    shutil.rmtree(out, ignore_errors=True)
    data = DataConfig(path=str(work / "corpus.jsonl"), tokenizer=str(work / "tokenizer"))
    start = time.perf_counter()
    summary = prepare(PrepareRequest(data, str(out), chunk_mb=2.0), progress=False)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": sum(s.tokens for s in summary.shards)}


def run() -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_data_prepare_") as tmp:
        work = Path(tmp)
        corpus_bytes = _write_corpus(work)
        _train_tokenizer(work)
        results: dict[str, list[dict]] = {"baseline": [], "prepare": []}
        for _ in range(ROUNDS):
            for kind in results:
                proc = subprocess.run(
                    [sys.executable, __file__, kind, str(work)],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if proc.returncode:
                    raise RuntimeError(f"{kind} failed: {proc.stderr[-2000:]}")
                results[kind].append(json.loads(proc.stdout.splitlines()[-1]))
    mb = corpus_bytes / 1e6
    ratios = [
        b["seconds"] / p["seconds"]
        for b, p in zip(results["baseline"], results["prepare"], strict=True)
    ]
    ratio = round(statistics.median(ratios), 3)
    best = {kind: min(runs, key=lambda r: r["seconds"]) for kind, runs in results.items()}
    baseline_mb_s = mb / best["baseline"]["seconds"]
    prepare_mb_s = mb / best["prepare"]["seconds"]
    return {
        "corpus_mb": round(mb, 1),
        "vocab_size": VOCAB,
        "tokens": best["prepare"]["tokens"],
        "baseline_encode_batch_mb_s": round(baseline_mb_s, 2),
        "prepare_mb_s": round(prepare_mb_s, 2),
        "prepare_tokens_per_s": round(best["prepare"]["tokens"] / best["prepare"]["seconds"]),
        "ratio_per_round": [round(r, 3) for r in ratios],
        "runs": results,
        "checks": {
            "prepare_vs_encode_batch": {
                "value": ratio,
                "target": f">= {TARGET}",
                "ok": ratio >= TARGET,
            }
        },
    }


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(_measure(sys.argv[1], Path(sys.argv[2]))))
    else:
        print(json.dumps(run(), indent=2))
