"""A run directory's layout: every path below is relative to `<run_dir>` (a local folder or an
s3:// prefix). The trainer writes `config.yaml`, `logs/` and `checkpoints/`; the launcher writes
`job/` (local backend state) and `code/` (packed workdirs) and reads the rest; a PyTorchJob's
pods write `pod-starts/`."""

from __future__ import annotations

CONFIG_FILE = "config.yaml"
"""The resolved trainer config (`contract.config.RunConfig`) the run trained with."""
LOGS_DIR = "logs"
METRICS_FILE = f"{LOGS_DIR}/metrics.jsonl"
"""One JSON object a line: step metrics and events, appended by rank 0."""
CHECKPOINTS = "checkpoints"
"""One folder per saved step (`contract.checkpoints.step_dir`)."""
JOB_DIR = "job"
"""The local backend's state: the request, the launch record, the output log."""
RESTARTS_FILE_ENV = "TRAINSTACK_RESTARTS_FILE"
"""Where the agent (trainer.launch) writes how many times it restarted the ranks so far (the
local backend's job/restarts, read by `trainstack status`); unset: not recorded."""
POD_STARTS_DIR = "pod-starts"
"""`pod-starts/<pod name>`: how many times a PyTorchJob's replica has started in its current
submission (its pods keep one name across the operator's recreations), and which submission
that is, written by `trainer.pod_starts` before the program."""
POD_NAME_ENV = "TRAINSTACK_POD_NAME"
"""The pod's own name (the downward API's metadata.name), the key of its `pod-starts/` file."""
SUBMISSION_ENV = "TRAINSTACK_SUBMISSION"
"""Which submission of the run the pod belongs to (the downward API's copy of the job's
`created-at` annotation, stamped on its pod templates at submit): a new one counts from 0."""
CODE_DIR = "code"
"""Packed `runner.workdir` archives, `code/<sha256>.tar.gz`."""
