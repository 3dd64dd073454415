"""`trainstack data prepare`: JSONL sources (paths, globs, s3:// prefixes; plain, .gz, .zst)
-> token shards and a manifest in the `trainer.data.shard_format` layout, written by a pool of
tokenizing processes, on this machine or as the slices of a Kubernetes Indexed Job
(`python -m trainer.data.prepare`). The image runs it, so it lives with the trainer."""

from trainer.data.prepare.plan import Plan, PrepareRequest, make_plan
from trainer.data.prepare.run import Summary, finalize, prepare, run_slice

__all__ = ["Plan", "PrepareRequest", "Summary", "finalize", "make_plan", "prepare", "run_slice"]
