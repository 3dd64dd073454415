"""What an eval Job's pod runs on the cluster: `python -m trainer.evaluation.job --run-dir URI
--step N --settings JSON`, the same `evaluate_run` as `trainstack eval RUN --step N` on this
machine (the export of the checkpoint to the pod's scratch, lm-eval's `hf` model on its GPU,
results under `<run_dir>/eval/step-N/`, results.json last). In the trainer image, which holds
trainer/ and contract/ only (jobs/ is never in it), so the entry point lives here.

Exit codes: 0 scored; 2 bad input (the settings, the step, a task name, lm-eval missing from
the image), which the Job's podFailurePolicy fails at once instead of retrying; 1 anything
else (an S3 error, CUDA out of memory), which the Job may retry.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

from contract.config import EXIT_BAD_INPUT
from trainer.errors import ConfigError
from trainer.evaluation.config import EvalConfig, check_eval_config
from trainer.storage import StorageError

PREFIX = "[eval]"


def _say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.evaluation.job")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--step", required=True, type=int)
    parser.add_argument("--settings", required=True, help="EvalConfig's fields as JSON")
    args = parser.parse_args(argv)
    try:
        settings = EvalConfig(**json.loads(args.settings))
        check_eval_config(settings)
    except (ValueError, TypeError, ConfigError) as exc:
        _say(f"not evaluated: --settings: {exc}")
        return EXIT_BAD_INPUT
    if importlib.util.find_spec("lm_eval") is None:
        _say("not evaluated: this image has no lm-evaluation-harness (the hf- image variant does)")
        return EXIT_BAD_INPUT
    # lazy: torch, transformers and lm-eval (seconds), once the arguments are good
    from trainer.evaluation.harness import evaluate_run
    from trainer.evaluation.results import headline

    try:
        outcome = evaluate_run(args.run_dir, settings, step=args.step)
    except ConfigError as exc:
        _say(f"not evaluated: {exc}")
        return EXIT_BAD_INPUT
    except StorageError as exc:
        _say(f"step {args.step} failed: {exc}")
        return 1
    _say(
        f"step {args.step} in {outcome.seconds:.1f} s: {headline(outcome.summary)}; "
        f"results in {outcome.destination}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
