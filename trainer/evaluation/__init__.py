"""After training: a run's checkpoints scored by lm-evaluation-harness (`trainstack eval`).

`config` holds the `eval.*` keys, `results` the layout of `<run_dir>/eval/` and its bounded
reader (torch-free: the Training API reads it), `tasks` lm-eval's task index (checked at
launch too), `harness` the evaluation itself.
"""
