"""`trainstack eval RUN [--step N] [--endpoint URL] eval.tasks=[...] [eval.<key>=... ...]
[overrides ...]`: score a run's checkpoint with lm-evaluation-harness (the `eval` extra).

Directly: the checkpoint (default: the newest committed) is exported to a temporary directory
and lm-eval's `hf` model reads it. With --endpoint: lm-eval's `local-completions` model asks a
served OpenAI-compatible API (`trainstack serve-model`, vLLM) instead, with the run's own
tokenizer. Results: `<run_dir>/eval/<checkpoint>/` (results.json, samples_<task>.jsonl), shown
by `status`, `runs` and the Training API. Bad input is one line and exit 2, before any model
is loaded.

With `backend=kubernetes` (or `backend=render`, which writes it out): one eval Job on one GPU of
`compute=<instance type>`, queued through the stack's LocalQueue (jobs/commands/eval_cluster.py).
"""

from __future__ import annotations

import argparse

from contract.config import EXIT_BAD_INPUT
from jobs.backends.base import BackendError
from jobs.commands.eval_cluster import composed, run_on_cluster
from jobs.commands.run_lookup import existing_run_dir, fail
from jobs.validate_common import in_pods
from trainer.errors import ConfigError
from trainer.evaluation.config import parse_eval_config, split_overrides
from trainer.evaluation.results import headline
from trainer.storage import StorageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="run id, or a run dir (path or s3://)")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the newest committed)")
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="evaluate through this OpenAI-compatible server (e.g. http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        default=[],
        help="eval.tasks=[...], eval.include_path=DIR, eval.limit=N, ...; where runs are; "
        "backend=kubernetes|render compute=<GPU type>: an eval Job on one GPU",
    )


def run(args: argparse.Namespace) -> int:
    ours, rest = split_overrides(args.overrides)
    try:
        cfg = parse_eval_config(ours)
        if args.endpoint is not None and not args.endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"--endpoint: {args.endpoint!r}; allowed: an http(s):// URL")
        if any(o.startswith("backend=") for o in rest):  # else: here, composing nothing more
            job_cfg = composed(rest)
            if in_pods(job_cfg):
                return run_on_cluster(args, cfg, job_cfg, rest)
        run_dir = existing_run_dir(args.run_id, rest)
    except ConfigError as err:
        return fail("eval", str(err), EXIT_BAD_INPUT)
    except BackendError as err:
        return fail("eval", str(err), EXIT_BAD_INPUT)
    # lazy: torch, transformers and lm-eval take seconds; bad input answers first
    from trainer.evaluation.harness import evaluate_run

    try:
        outcome = evaluate_run(run_dir, cfg, step=args.step, endpoint=args.endpoint)
    except ConfigError as err:
        return fail("eval", str(err), EXIT_BAD_INPUT)
    except StorageError as err:
        return fail("eval", str(err))
    summary = outcome.summary
    print(
        f"evaluated step {summary.step} of {args.run_id} ({summary.via}) in "
        f"{outcome.seconds:.1f} s: {headline(summary)}; results in {outcome.destination}"
    )
    return 0
