"""Score a run's checkpoint with lm-evaluation-harness: directly (its `hf` model on the
checkpoint's export) or through a served OpenAI-compatible endpoint (its `local-completions`
model). Everything is checked before lm-eval loads a model: the step, the task names, the
endpoint; the results land in `<run_dir>/eval/<checkpoint>/` with results.json last.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import requests
import torch
from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager
from lm_eval.utils import handle_non_serializable

from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig
from trainer.evaluation.results import EVAL_DIR, RESULTS_FILE, EvalSummary, eval_name, scores_of
from trainer.evaluation.tasks import task_manager
from trainer.hf.export import choose_step, export_run, export_tokenizer, run_model
from trainer.hf.export_lora import run_lora
from trainer.storage import StorageError, open_run_storage

ENDPOINT_TIMEOUT_S = 10


@dataclass(frozen=True)
class EvalOutcome:
    summary: EvalSummary
    destination: str
    seconds: float


def served_model(endpoint: str) -> str:
    """The first model id `GET <endpoint>/v1/models` lists: the endpoint must answer before
    anything is evaluated."""
    url = f"{endpoint.rstrip('/')}/v1/models"
    try:
        answer = requests.get(url, timeout=ENDPOINT_TIMEOUT_S)
        answer.raise_for_status()
        return str(answer.json()["data"][0]["id"])
    except (requests.RequestException, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError(
            f"--endpoint: {url} did not list a model ({type(exc).__name__}); allowed: an "
            "OpenAI-compatible server (trainstack serve-model, vLLM) that is up"
        ) from None


def evaluate_run(
    run_dir: str,
    cfg: EvalConfig,
    *,
    step: int | None = None,
    endpoint: str | None = None,
    manager: TaskManager | None = None,
) -> EvalOutcome:
    """Evaluate checkpoint `step` (default: the newest committed) of `run_dir`. `manager`:
    `cfg`'s task index when the caller built it (one per process evaluating several
    checkpoints: indexing lm-eval's own tasks takes about 30 s)."""
    try:
        storage = open_run_storage(run_dir)
        step = choose_step(storage, step)
        args, _ = run_model(storage)
        lora = run_lora(storage) is not None
    except StorageError as exc:
        raise ConfigError(f"RUN: {exc}") from None
    manager = manager or task_manager(cfg)
    model_id = served_model(endpoint) if endpoint else None
    work = Path(tempfile.mkdtemp(prefix="trainstack-eval-"))
    started = time.monotonic()
    try:
        model_dir = work / "model"
        if endpoint:
            model_dir.mkdir()
            export_tokenizer(run_dir, model_dir)
            model = "local-completions"
            model_args = {
                "base_url": f"{endpoint.rstrip('/')}/v1/completions",
                "model": model_id,
                "tokenizer": str(model_dir),
                "tokenizer_backend": "huggingface",
                "tokenized_requests": True,
                "max_length": args.max_seq_len,
                "max_retries": 1,
            }
        else:
            export_run(run_dir, str(model_dir), step=step, dtype="fp32", merge=lora)
            model = "hf"
            model_args = {
                "pretrained": str(model_dir),
                "dtype": "float32",
                "device": "cuda" if torch.cuda.is_available() else "cpu",
                "max_length": args.max_seq_len,
            }
        results = simple_evaluate(
            model=model,
            model_args=model_args,
            tasks=list(cfg.tasks),
            num_fewshot=cfg.num_fewshot,
            batch_size=cfg.batch_size,
            limit=cfg.limit,
            task_manager=manager,
            log_samples=True,
            gen_kwargs=None if cfg.max_gen_tokens is None else {"max_gen_toks": cfg.max_gen_tokens},
        )
        seconds = time.monotonic() - started
        name = eval_name(step, endpoint is not None)
        results["trainstack"] = {
            "step": step,
            "via": "endpoint" if endpoint else "export",
            "endpoint": endpoint,
            "config": asdict(cfg),
            "seconds": round(seconds, 3),
        }
        _write_results(storage, name, results, work / "out")
        summary = EvalSummary(name, step, results["trainstack"]["via"], scores_of(results))
        return EvalOutcome(summary, storage.uri(f"{EVAL_DIR}/{name}"), seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_results(storage, name: str, results: dict, out: Path) -> None:
    """Samples first, results.json last: a folder without it was cut short."""
    out.mkdir(parents=True)
    samples = results.pop("samples", None) or {}
    rel = f"{EVAL_DIR}/{name}"
    storage.delete_tree(rel)  # a second evaluation of the checkpoint replaces the first
    for task, docs in samples.items():
        path = out / f"samples_{task}.jsonl"
        with path.open("w") as handle:
            for doc in docs:
                handle.write(json.dumps(doc, default=handle_non_serializable) + "\n")
        storage.upload_file(path, f"{rel}/{path.name}")
    text = json.dumps(results, default=handle_non_serializable, indent=2, sort_keys=True)
    storage.write_bytes(f"{rel}/{RESULTS_FILE}", (text + "\n").encode())
