"""JSONL lines -> records, counting malformed ones against `data.max_bad_fraction`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from contract.config import DataConfig
from trainer.errors import ConfigError
from trainer.storage import StorageError, read_uri_bytes

T = TypeVar("T")


class BadRecord(ValueError):
    """This line does not hold what `data.format` expects (the message says what is wrong)."""


def read_records(
    cfg: DataConfig, extract: Callable[[Any], T | None], expected: str
) -> tuple[list[T], int]:
    """`extract(record)` of every non-blank line, and the number of malformed lines.

    `extract` returns None for a record to skip (an empty text) and raises `BadRecord` for a
    malformed one; `expected` says what a good line is, for the error above the limit.
    """
    if "://" not in cfg.path and not Path(cfg.path).is_file():
        raise ConfigError(f"data.path: no such file {cfg.path!r} (a JSONL file or s3:// URI)")
    try:
        raw = read_uri_bytes(cfg.path)
    except StorageError as exc:
        raise ConfigError(f"data.path: {exc}") from None
    items: list[T] = []
    bad, first_bad, lines = 0, "", 0
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        lines += 1
        try:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise BadRecord("not JSON") from None
            item = extract(record)
        except BadRecord as exc:
            bad += 1
            first_bad = first_bad or f"line {number}: {exc}"
            continue
        if item is not None:
            items.append(item)
    if bad and bad > cfg.max_bad_fraction * lines:
        raise ConfigError(
            f"data.path: {bad} of {lines} lines ({100 * bad / lines:.1f}%) of {cfg.path!r} are "
            f"not {expected} (first: {first_bad}); data.max_bad_fraction allows "
            f"{cfg.max_bad_fraction}"
        )
    return items, bad


def string_field(record: Any, key: str) -> str:
    if not isinstance(record, dict):
        raise BadRecord("not a JSON object")
    value = record.get(key)
    if not isinstance(value, str):
        raise BadRecord(f"no string {key!r} field")
    return value
