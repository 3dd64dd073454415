"""What the trainer and the launcher (`jobs/`, `infra/`) both read, in one torch-free place.

- `contract.run_dir`: the run directory's layout (config.yaml, logs/metrics.jsonl,
  checkpoints/, job/, code/), each name spelt once.
- `contract.config`: the trainer's config schema, the structure `jobs` writes into config.yaml.
- `contract.checkpoints`: the names inside `checkpoints/` (step folders, the commit marker).
- `contract.model`: model families as data (architecture, named sizes, Hugging Face names).
- `contract.checks`: the config checks that need no I/O (choices, ranges, LoRA, model shape).
- `contract.plan`: what the trainer and the launcher's plan derive from a config alike (the
  mesh, the accumulation steps, `make_plan`).
- `contract.model.hf_config`: a Hugging Face config.json read as `ModelArgs`.
- `contract.errors`: `ConfigError`, the one line both sides raise for a bad value.

Pure Python on purpose: the launcher, the Training API image and `pulumi up` import it without
torch. It imports nothing from `trainer`, `jobs` or `infra` (import-linter checks both).
"""
