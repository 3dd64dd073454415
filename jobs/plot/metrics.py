"""Reading a run's `logs/metrics.jsonl` (local or s3://), tolerant of what is not there.

The trainer writes one JSON object per line: training lines carry `step`, `loss`,
`tokens_seen`, `throughput/tokens_per_s`, `mfu/percent`, `memory/*_gib`; evaluation lines
`step` and `eval_loss`; notes have no `step`. A line being written, a missing file or a key an
older trainer did not write are skipped, never an error.
"""

from __future__ import annotations

import json
import math
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
    count: int | None = None
    """Lines with a step in the file, when `records` is a downsampled selection of them."""

    @property
    def points(self) -> int:
        return len(self.records) if self.count is None else self.count

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


# -- incremental reading ---------------------------------------------------------------------
# A metrics.jsonl grows for as long as a run trains (tens of MB over a long one) and readers
# poll it every few seconds: they remember how far they read and the file's version (an S3
# ETag) and read only what was appended, with one ranged GET (a 304 when nothing changed).

TAIL_BYTES = 64 * 1024
"""A first look at a run's last step reads at most this much from the end of the file."""
BLOCK_RECORDS = 256
"""Records per entry of a file's sparse index (pages start at an entry)."""


def _complete_lines(data: bytes) -> bytes:
    """`data` up to its last newline (a line being written is read again next time)."""
    return data[: data.rfind(b"\n") + 1]


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(record, dict) and isinstance(record.get("step"), int | float):
        return record
    return None


def read_appended(storage, consumed: int, tag: str | None):
    """(what follows the first `consumed` bytes, whether the file was replaced). `consumed`
    ends a line, so the read starts one byte early and that byte must be a newline; if not
    (or the file is shorter now) the file is another one (a new run in the same dir)."""
    from trainer.storage.base import RangeRead

    read = storage.read_range(METRICS_FILE, max(0, consumed - 1), tag=tag)
    if read.data is None or consumed == 0:
        return read, False
    if read.begin != consumed - 1 or read.data[:1] != b"\n":
        return read, True
    return RangeRead(read.data[1:], consumed, read.size, read.tag), False


@dataclass
class _Tail:
    consumed: int = 0
    """Bytes of the file read through its last complete line."""
    tag: str | None = None
    last: tuple[int | None, float | None] = (None, None)


class LastMetrics:
    """Step and loss of runs' last training lines, kept current by reading only the bytes
    appended since the previous look (the first look reads the file's last TAIL_BYTES).
    Process-wide (`LAST_METRICS`), bounded to `max_runs` run dirs."""

    def __init__(self, max_runs: int = 4096):
        import threading
        from collections import OrderedDict

        self.max_runs = max_runs
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_dir: str) -> tuple[int | None, float | None]:
        from trainer.storage import open_run_storage

        with self._lock:
            tail = self._tails.pop(run_dir, None) or _Tail()
        storage = open_run_storage(run_dir)
        fresh = tail.consumed == 0
        replaced = False
        if not fresh:
            read, replaced = read_appended(storage, tail.consumed, tail.tag)
        if fresh or replaced:
            tail, fresh = _Tail(), True
            read = storage.read_range(METRICS_FILE, -TAIL_BYTES)
        if read.data is not None:
            data = read.data
            if fresh and read.begin > 0:
                data = data[data.find(b"\n") + 1 :]  # the window began mid-line
                skipped = len(read.data) - len(data)
            else:
                skipped = 0
            complete = _complete_lines(data)
            for line in reversed(complete.splitlines()):
                record = _record(line)
                if record is not None and "loss" in record:
                    tail.last = (record.get("step"), record.get("loss"))
                    break
            tail.consumed = read.begin + skipped + len(complete)
            # A line still being written: read again from `consumed` next time (no tag).
            tail.tag = read.tag if len(complete) == len(data) else None
        with self._lock:
            self._tails[run_dir] = tail
            while len(self._tails) > self.max_runs:
                self._tails.popitem(last=False)
        return tail.last


LAST_METRICS = LastMetrics()


SERIES_KEYS = (
    "step",
    "tokens_seen",
    "loss",
    "eval_loss",
    "throughput/tokens_per_s",
    "mfu/percent",
    "memory/max_allocated_gib",
    "memory/max_reserved_gib",
    "memory/max_rss_gib",
)
"""What figures draw, kept per record as columns (NaN where a record lacks the key)."""


class MetricsFile:
    """One run's metrics.jsonl for the API: `refresh()` reads what was appended (nothing when
    the version is unchanged) into a sparse index (the byte offset and largest step of every
    BLOCK_RECORDS records) and the figure's columns (8 bytes per key and record). `page()`
    reads one page's bytes by the index; `downsampled()` gives a figure's records at a
    screen's width. `bytes_read` counts what came from storage."""

    def __init__(self, run_id: str, run_dir: str):
        import threading

        from trainer.storage import open_run_storage

        self.run_id = run_id
        self.run_dir = run_dir
        self.storage = open_run_storage(run_dir)
        self.bytes_read = 0
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        from array import array

        self.consumed = 0
        self.tag: str | None = None
        self.count = 0
        self.blocks: list[list[int]] = []
        """[byte offset of the block's first record, largest step in it]."""
        self.columns = {key: array("d") for key in SERIES_KEYS}
        self.config: dict[str, Any] = {}

    def refresh(self) -> MetricsFile:
        with self.lock:
            try:
                read, replaced = read_appended(self.storage, self.consumed, self.tag)
                if replaced:  # another file now: start over
                    self._reset()
                    read = self.storage.read_range(METRICS_FILE, 0)
            except Exception:  # absent (not started yet) or unreadable from here
                return self
            if read.data is None:
                return self
            self.bytes_read += len(read.data)
            complete = _complete_lines(read.data)
            offset = read.begin
            for line in complete.splitlines(keepends=True):
                record = _record(line)
                if record is not None:
                    self._add(record, offset)
                offset += len(line)
            self.consumed = read.begin + len(complete)
            self.tag = read.tag if len(complete) == len(read.data) else None
            if not self.config:
                self.config = read_config(self.run_dir)
        return self

    def _add(self, record: dict[str, Any], offset: int) -> None:
        step = int(record["step"])
        if self.count % BLOCK_RECORDS == 0:
            self.blocks.append([offset, step])
        else:
            self.blocks[-1][1] = max(self.blocks[-1][1], step)
        self.count += 1
        for key, column in self.columns.items():
            value = record.get(key)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            column.append(float(value) if ok else math.nan)

    def page(self, after_step: int | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Up to `limit` records with step > after_step, in file order, and whether more
        follow; reads the blocks that hold them, not the file."""
        with self.lock:
            blocks = [list(b) for b in self.blocks]
            consumed = self.consumed
        first = next(
            (i for i, b in enumerate(blocks) if after_step is None or b[1] > after_step), None
        )
        records: list[dict[str, Any]] = []
        if first is None:
            return records, False
        index = first
        while index < len(blocks) and len(records) <= limit:
            last = min(len(blocks), index + max(1, math.ceil((limit + 1) / BLOCK_RECORDS)))
            end = blocks[last][0] if last < len(blocks) else consumed
            read = self.storage.read_range(METRICS_FILE, blocks[index][0], end=end)
            self.bytes_read += len(read.data or b"")
            for line in (read.data or b"").splitlines():
                record = _record(line)
                if record is not None and (after_step is None or record["step"] > after_step):
                    records.append(record)
            index = last
        return records[:limit], len(records) > limit

    def downsampled(self, width: int) -> RunMetrics:
        """The figure's records, at most about 4 per horizontal pixel per series: each
        bucket of records keeps its first, last, lowest-loss and highest-loss record (spikes
        stay visible); every evaluation record is kept."""
        with self.lock:
            count = self.count
            columns = {k: c[:count] for k, c in self.columns.items()}
            config = self.config
        buckets = max(1, width)
        keep: set[int] = set()
        eval_loss, loss = columns["eval_loss"], columns["loss"]
        if count <= 4 * buckets:
            keep = set(range(count))
        else:
            for b in range(buckets):
                lo, hi = b * count // buckets, (b + 1) * count // buckets
                if lo >= hi:
                    continue
                keep.update((lo, hi - 1))
                scored = [i for i in range(lo, hi) if not math.isnan(loss[i])]
                if scored:
                    keep.add(min(scored, key=loss.__getitem__))
                    keep.add(max(scored, key=loss.__getitem__))
            keep.update(i for i in range(count) if not math.isnan(eval_loss[i]))
        records = []
        for i in sorted(keep):
            record = {k: c[i] for k, c in columns.items() if not math.isnan(c[i])}
            record["step"] = int(record["step"])
            records.append(record)
        return RunMetrics(self.run_id, records, config, count=count)


class MetricsFiles:
    """The MetricsFile of the runs looked at lately (a bounded number), refreshed on use."""

    def __init__(self, max_runs: int = 16):
        import threading
        from collections import OrderedDict

        self.max_runs = max_runs
        self._files: OrderedDict[str, MetricsFile] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str, run_dir: str) -> MetricsFile:
        with self._lock:
            found = self._files.pop(run_dir, None) or MetricsFile(run_id, run_dir)
            self._files[run_dir] = found
            while len(self._files) > self.max_runs:
                self._files.popitem(last=False)
        return found.refresh()
