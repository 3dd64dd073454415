"""`<run_dir>/eval/<checkpoint>/`: what `trainstack eval` leaves, and its bounded reader.

One folder per evaluated checkpoint (`step-00000010`; `step-00000010-endpoint` when scored
through a served endpoint): lm-eval's results JSON (`results.json`, with a `trainstack` block
saying what was evaluated and how) and its per-document samples (`samples_<task>.jsonl`).
`results.json` is written last, so a folder without it is an evaluation cut short and is not
listed. torch-free: `status`, `runs` and the Training API read it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import PurePosixPath

from contract.checkpoints import parse_step, step_dir
from trainer.storage import RunStorage, StorageError, open_run_storage

EVAL_DIR = "eval"
RESULTS_FILE = "results.json"
MAX_RESULTS_BYTES = 4 * 2**20
"""A results.json read back is at most this (lm-eval's is a few KB per task plus the configs
of the tasks it ran); a larger one is listed with an error, never parsed."""
MAX_DEPTH = 64
"""Nesting of arrays and objects a results.json may have (lm-eval's is under 10 deep); a deeper
one is listed with an error, never parsed (json's parser recurses once a level)."""
MAX_LISTED = 256
"""Evaluations listed per run (the newest steps): a run's own code could write thousands."""
ENDPOINT_SUFFIX = "-endpoint"


def eval_name(step: int, via_endpoint: bool) -> str:
    """The checkpoint's own folder name (contract.checkpoints.step_dir), + `-endpoint`."""
    return PurePosixPath(step_dir(step)).name + (ENDPOINT_SUFFIX if via_endpoint else "")


@dataclass(frozen=True)
class EvalSummary:
    checkpoint: str
    """The folder under eval/: `step-<8 digits>` (+ `-endpoint`)."""
    step: int
    via: str
    """`export` (lm-eval's hf model on the export) or `endpoint` (local-completions)."""
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    """task -> metric (`acc,none`, `exact_match,strict-match`, ...) -> value; no stderrs."""
    error: str | None = None
    """Why the results could not be read (then `scores` is empty)."""


def parse_eval_name(name: str) -> tuple[int, str] | None:
    base = name.removesuffix(ENDPOINT_SUFFIX)
    step = parse_step(base)
    if step is None:
        return None
    return step, "endpoint" if name.endswith(ENDPOINT_SUFFIX) else "export"


def scores_of(results: dict) -> dict[str, dict[str, float]]:
    """lm-eval's `results` block, numbers only (stderrs and aliases left out)."""
    out: dict[str, dict[str, float]] = {}
    block = results.get("results")
    if not isinstance(block, dict):
        return out
    for task, metrics in list(block.items())[:MAX_LISTED]:
        if not isinstance(metrics, dict):
            continue
        numbers = {
            str(k): value
            for k, v in metrics.items()
            if "," in str(k)  # lm-eval's `metric,filter` keys (not sample_len)
            and "_stderr" not in str(k)
            and (value := _finite(v)) is not None
        }
        out[str(task)[:200]] = dict(list(numbers.items())[:64])
    return out


_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _depth(raw: bytes) -> int:
    """The deepest nesting of `raw`'s brackets outside strings (linear: escapes, then strings,
    then everything but brackets are dropped before the brackets are counted)."""
    brackets = _STRING.sub(b"", _ESCAPE.sub(b"", raw)).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _finite(value: object) -> float | None:
    """A JSON number as a finite float; None for anything else (an int past a float too)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def read_eval(storage: RunStorage, name: str) -> EvalSummary | None:
    parsed = parse_eval_name(name)
    if parsed is None:
        return None
    step, via = parsed
    rel = f"{EVAL_DIR}/{name}/{RESULTS_FILE}"
    try:
        read = storage.read_range(rel, 0, end=MAX_RESULTS_BYTES + 1)
    except StorageError:
        return None  # cut short (no results.json yet) or gone
    raw = read.data or b""
    if len(raw) > MAX_RESULTS_BYTES:
        return EvalSummary(name, step, via, error=f"{RESULTS_FILE} over {MAX_RESULTS_BYTES} bytes")
    if _depth(raw) > MAX_DEPTH:
        return EvalSummary(name, step, via, error=f"{RESULTS_FILE} nested over {MAX_DEPTH} levels")
    try:
        results = json.loads(raw)
    except RecursionError:  # `[` * 100000: the parser's nesting is bounded by the stack's
        return EvalSummary(name, step, via, error=f"{RESULTS_FILE} nested over {MAX_DEPTH} levels")
    except ValueError:  # not JSON, not UTF-8, an int past Python's digit limit
        return EvalSummary(name, step, via, error=f"{RESULTS_FILE} is not valid JSON")
    if not isinstance(results, dict):
        return EvalSummary(name, step, via, error=f"{RESULTS_FILE} is not a JSON object")
    return EvalSummary(name, step, via, scores_of(results))


def list_evals(storage: RunStorage) -> list[EvalSummary]:
    """The run's finished evaluations, by step (at most MAX_LISTED, the newest)."""
    try:
        names = storage.list_dir(EVAL_DIR)
    except StorageError:
        return []
    named = sorted(n for n in names if parse_eval_name(n) is not None)  # 8 digits: by step
    out = []
    for name in named[-MAX_LISTED:]:
        summary = read_eval(storage, name)
        if summary is not None:
            out.append(summary)
    return out


def run_evals(run_dir: str | None) -> list[EvalSummary]:
    """`list_evals` of a run dir; [] when there is none or it cannot be read (a listing of
    runs never fails for one run's eval folder)."""
    if not run_dir:
        return []
    try:
        return list_evals(open_run_storage(run_dir))
    except StorageError:
        return []


def headline(summary: EvalSummary) -> str:
    """`task acc=0.5000, gen exact_match=0.2500`: each task's first metric, for one line."""
    if summary.error:
        return f"unreadable: {summary.error}"
    parts = []
    for task, metrics in summary.scores.items():
        if metrics:
            metric, value = next(iter(metrics.items()))
            parts.append(f"{task} {metric.split(',')[0]}={value:.4f}")
    return ", ".join(parts) or "no scores"
