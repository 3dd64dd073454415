"""Reading a run's `logs/metrics.jsonl` (local or s3://), tolerant of what is not there.

The trainer writes one JSON object per line: training lines carry `step`, `loss`,
`tokens_seen`, `throughput/tokens_per_s`, `mfu/percent`, `memory/*_gib`; evaluation lines
`step` and `eval_loss`; notes have no `step`. A line being written, a missing file or a key an
older trainer did not write are skipped, never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

METRICS_FILE = "logs/metrics.jsonl"
CONFIG_FILE = "config.yaml"


@dataclass
class RunMetrics:
    run_id: str
    records: list[dict[str, Any]] = field(default_factory=list)
    """Lines with a numeric `step`, in file order."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run dir's config.yaml as the trainer wrote it ({} before it started)."""

    @property
    def last_step(self) -> int | None:
        return self.records[-1]["step"] if self.records else None


def parse_lines(text: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if isinstance(record, dict) and isinstance(record.get("step"), int | float):
            records.append(record)
    return records


def _read_text(run_dir: str, path: str) -> str | None:
    from trainer.storage import open_run_storage

    try:
        return open_run_storage(run_dir).read_text(path)
    except Exception:  # absent (not started yet) or unreadable from here
        return None


def read_config(run_dir: str) -> dict[str, Any]:
    import yaml

    text = _read_text(run_dir, CONFIG_FILE)
    try:
        loaded = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def read_run(run_id: str, run_dir: str | None) -> RunMetrics:
    if not run_dir:
        return RunMetrics(run_id)
    text = _read_text(run_dir, METRICS_FILE) or ""
    return RunMetrics(run_id, parse_lines(text), read_config(run_dir))


def max_steps(config: dict[str, Any]) -> int | None:
    value = (config.get("trainer") or {}).get("max_steps")
    return value if isinstance(value, int) else None
