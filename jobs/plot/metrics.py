"""Reading a run's `logs/metrics.jsonl` (local or s3://), tolerant of what is not there.

The trainer writes one JSON object per line: training lines carry `step`, `loss`,
`tokens_seen`, `throughput/tokens_per_s`, `mfu/percent`, `memory/*_gib`; evaluation lines
`step` and `eval_loss`; notes have no `step`. A line being written, a missing file or a key an
older trainer did not write are skipped, never an error.
"""

from __future__ import annotations

import json
import math
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import yaml

from contract.run_dir import CONFIG_FILE, METRICS_FILE
from trainer.evaluation.results import EvalSummary
from trainer.storage import open_run_storage
from trainer.storage.base import RangeRead


@dataclass
class RunMetrics:
    run_id: str
    records: list[dict[str, Any]] = field(default_factory=list)
    """Lines with a numeric `step`, in file order."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run dir's config.yaml as the trainer wrote it ({} before it started)."""
    count: int | None = None
    """Lines with a step in the file, when `records` is a downsampled selection of them."""
    evals: list[EvalSummary] = field(default_factory=list)
    """The run's `trainstack eval` results by checkpoint (`<run_dir>/eval/`), when read."""

    @property
    def points(self) -> int:
        return len(self.records) if self.count is None else self.count

    @property
    def last_step(self) -> int | None:
        return self.records[-1]["step"] if self.records else None


def parse_lines(text: str) -> list[dict[str, Any]]:
    records = []
    for line in text.encode("utf-8", "replace").splitlines():
        record = _record(line)
        if record is not None:
            records.append(record)
    return records


def _read_text(run_dir: str, path: str) -> str | None:
    try:
        return open_run_storage(run_dir).read_text(path)
    except Exception:  # absent (not started yet) or unreadable from here
        return None


MAX_CONFIG_BYTES = 256 * 1024
"""A run's config.yaml is a few KB; a larger one (written by the run's own code) is not read."""
MAX_CONFIG_NODES = 20_000
MAX_CONFIG_DEPTH = 32


def read_config(run_dir: str) -> dict[str, Any]:
    """The run dir's config.yaml as plain dicts, lists and scalars; {} when it is absent,
    too large, not YAML, not a mapping, too deep or too big a tree (anchors that alias a
    node many times are counted each time, so no tree costs more than MAX_CONFIG_NODES)."""
    try:
        read = open_run_storage(run_dir).read_range(CONFIG_FILE, 0, end=MAX_CONFIG_BYTES + 1)
    except Exception:  # absent (not started yet) or unreadable from here
        return {}
    return parse_config(read.data or b"")


def parse_config(data: bytes | str) -> dict[str, Any]:
    """`read_config`'s parse of a config.yaml's text (the run's own, or its ConfigMap's)."""
    if not data or len(data) > MAX_CONFIG_BYTES:
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loaded = yaml.load(data, Loader=loader)  # a safe loader (the C one when built)
        plain = _plain(loaded, [MAX_CONFIG_NODES], 0)
    except (yaml.YAMLError, ValueError, RecursionError):
        return {}
    return plain if isinstance(plain, dict) else {}


def _plain(value: Any, budget: list[int], depth: int) -> Any:
    """`value` copied as a tree of dicts (string keys), lists and scalars; ValueError past the
    node budget or the depth (which a self-referencing anchor reaches)."""
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_CONFIG_DEPTH:
        raise ValueError("config too large")
    if isinstance(value, dict):
        return {str(k): _plain(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, budget, depth + 1) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # dates and the like


def read_run(run_id: str, run_dir: str | None) -> RunMetrics:
    if not run_dir:
        return RunMetrics(run_id)
    text = _read_text(run_dir, METRICS_FILE) or ""
    return RunMetrics(run_id, parse_lines(text), read_config(run_dir))


def max_steps(config: dict[str, Any]) -> int | None:
    """trainer.max_steps when it is a positive integer (the file is the run's own)."""
    trainer = config.get("trainer") if isinstance(config, dict) else None
    value = trainer.get("max_steps") if isinstance(trainer, dict) else None
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_STEP
    return value if ok else None


# -- incremental reading ---------------------------------------------------------------------
# A metrics.jsonl grows for as long as a run trains (tens of MB over a long one) and readers
# poll it every few seconds: they remember how far they read and the file's version (an S3
# ETag) and read only what was appended, with one ranged GET (a 304 when nothing changed).

TAIL_BYTES = 64 * 1024
"""A first look at a run's last step reads at most this much from the end of the file."""
BLOCK_RECORDS = 256
"""Records per entry of a file's sparse index (pages start at an entry)."""
MAX_LINE_BYTES = 64 * 1024
"""A metrics line is a few hundred bytes; a longer one (the run's own code wrote it) is
skipped unread, like a malformed one."""
MAX_STEP = 2**63 - 1
REFRESH_BYTES = 2 * 1024 * 1024
"""What one API request may add to a file's index: a file of any size is indexed over
several requests, each bounded in time and memory."""
PAGE_BYTES = 8 * 1024 * 1024
"""What one page may read from storage (and so return)."""
KEPT_ROWS = 16_384
"""Records a file keeps for figures; past it, each group of 4 keeps its lowest and highest
loss (spikes stay visible) and evaluation records are kept until they alone fill half."""


def _constant(name: str) -> None:
    """NaN and Infinity (Python's json writes them) read as null: the API answers JSON."""
    return None


def _record(line: bytes) -> dict[str, Any] | None:
    """A training or evaluation line: a JSON object whose `step` is an integer in
    [0, MAX_STEP] (a float with an integral value counts); None for anything else."""
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        record = json.loads(line, parse_constant=_constant)
    except (ValueError, RecursionError):  # malformed, not UTF-8, or nested past the stack
        return None
    if not isinstance(record, dict):
        return None
    step = record.get("step")
    if isinstance(step, float) and step.is_integer():
        step = record["step"] = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        return None
    return {k: v for k, v in record.items() if _scalar(v)}


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _number(value: Any) -> float | None:
    """`value` as a finite float, or None (a string, a bool, NaN, an int past float's range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _complete_lines(data: bytes) -> bytes:
    """`data` up to its last newline (a line being written is read again next time)."""
    return data[: data.rfind(b"\n") + 1]


def read_appended(
    storage, consumed: int, tag: str | None, limit: int | None = None, expect: bytes = b"\n"
):
    """(what follows the first `consumed` bytes, at most `limit` of them; whether the file
    was replaced). The read starts one byte early and that byte must be `expect` (a newline:
    `consumed` ends a line); if not (or the file is shorter now) the file is another one (a
    new run in the same dir)."""
    begin = max(0, consumed - 1)
    end = None if limit is None else begin + limit + 1
    read = storage.read_range(METRICS_FILE, begin, end=end, tag=tag)
    if read.data is None or consumed == 0:
        return read, False
    if read.begin != consumed - 1 or read.data[:1] != expect:
        return read, True
    return RangeRead(read.data[1:], consumed, read.size, read.tag), False


def _at_end(read) -> bool:
    return read.size is not None and read.begin + len(read.data) >= read.size


@dataclass
class _Tail:
    consumed: int = 0
    """Bytes of the file read through its last complete line."""
    tag: str | None = None
    last: tuple[int | None, float | None] = (None, None)


class LastMetrics:
    """Step and loss of runs' last training lines, kept current by reading only the bytes
    appended since the previous look (the first look, and a look after more than TAIL_BYTES
    were appended, reads the file's last TAIL_BYTES). Process-wide (`LAST_METRICS`), bounded
    to `max_runs` run dirs."""

    def __init__(self, max_runs: int = 4096):
        self.max_runs = max_runs
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_dir: str) -> tuple[int | None, float | None]:
        with self._lock:
            tail = self._tails.pop(run_dir, None) or _Tail()
        storage = open_run_storage(run_dir)
        fresh = tail.consumed == 0
        replaced = False
        if not fresh:
            read, replaced = read_appended(storage, tail.consumed, tail.tag, limit=TAIL_BYTES)
            # More than TAIL_BYTES appended since the last look: only the end matters.
            replaced = replaced or (read.data is not None and not _at_end(read))
        if fresh or replaced:
            last = tail.last
            tail, fresh = _Tail(last=last), True
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
                    tail.last = (record["step"], _number(record["loss"]))
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
    the version is unchanged; at most `refresh_bytes` per call, so a large file is indexed
    over several) into a sparse index (the byte offset and largest step of every
    BLOCK_RECORDS records) and the figure's columns (at most KEPT_ROWS records). `page()`
    reads one page's bytes by the index; `downsampled()` gives a figure's records at a
    screen's width. `bytes_read` counts what came from storage. The file is the run's own:
    lines that are not records (too long, malformed, a step that is no integer) are skipped."""

    def __init__(self, run_id: str, run_dir: str, refresh_bytes: int | None = None):
        self.run_id = run_id
        self.run_dir = run_dir
        self.storage = open_run_storage(run_dir)
        self.refresh_bytes = refresh_bytes
        self.bytes_read = 0
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.consumed = 0
        self.last_byte = b"\n"
        """The byte before `consumed` (a newline unless inside a skipped line)."""
        self.skipping = False
        self.tag: str | None = None
        self.complete = False
        """Whether the index reached the end of the file at the last refresh."""
        self.count = 0
        self.block_offsets = array("q")
        """Byte offset of each block's first record."""
        self.block_steps = array("q")
        """Largest step in each block."""
        self.columns = {key: array("d") for key in SERIES_KEYS}
        self.config: dict[str, Any] = {}

    def refresh(self) -> MetricsFile:
        """Index what was appended: at most `refresh_bytes` (None: all of it, in chunks)."""
        chunk = self.refresh_bytes or REFRESH_BYTES
        with self.lock:
            try:
                read, replaced = read_appended(
                    self.storage, self.consumed, self.tag, chunk, self.last_byte
                )
                if replaced:  # another file now: start over
                    self._reset()
                    read = self.storage.read_range(METRICS_FILE, 0, end=chunk)
                while read.data is not None:
                    before = self.consumed
                    self._index(read)
                    if self.refresh_bytes is not None or self.complete or self.consumed == before:
                        break
                    read, replaced = read_appended(
                        self.storage, self.consumed, None, chunk, self.last_byte
                    )
                    if replaced:
                        break
            except Exception:  # absent (not started yet) or unreadable from here
                return self
            if not self.config:
                self.config = read_config(self.run_dir)
        return self

    def _index(self, read) -> None:
        data, begin = read.data, read.begin
        self.bytes_read += len(data)
        if self.skipping:  # inside a line too long to be a record: up to its end
            newline = data.find(b"\n")
            if newline < 0:
                self._skipped_to(begin, data)
                return
            data, begin, self.skipping = data[newline + 1 :], begin + newline + 1, False
            self.consumed, self.last_byte = begin, b"\n"
        complete = _complete_lines(data)
        offset = begin
        for line in complete.splitlines(keepends=True):
            record = _record(line)
            if record is not None:
                self._add(record, offset)
            offset += len(line)
        if complete:
            self.consumed, self.last_byte = begin + len(complete), b"\n"
        if len(data) - len(complete) > MAX_LINE_BYTES:
            self._skipped_to(begin + len(complete), data[len(complete) :])
            return
        self.complete = _at_end(read) and len(complete) == len(data)
        self.tag = read.tag if self.complete else None

    def _skipped_to(self, begin: int, partial: bytes) -> None:
        """`partial` (from `begin`) is part of a line too long to be a record: read past it."""
        if partial:
            self.consumed, self.last_byte = begin + len(partial), partial[-1:]
        self.skipping, self.complete, self.tag = True, False, None

    def _add(self, record: dict[str, Any], offset: int) -> None:
        step = record["step"]
        if self.count % BLOCK_RECORDS == 0:
            self.block_offsets.append(offset)
            self.block_steps.append(step)
        elif step > self.block_steps[-1]:
            self.block_steps[-1] = step
        self.count += 1
        for key, column in self.columns.items():
            value = _number(record.get(key))
            column.append(math.nan if value is None else value)
        if len(self.columns["step"]) >= KEPT_ROWS:
            self._thin()

    def _thin(self) -> None:
        """Halve the kept records: evaluation records stay (until they alone fill half),
        each group of 4 others keeps its lowest and highest loss."""
        loss, evals = self.columns["loss"], self.columns["eval_loss"]
        rows = len(loss)
        eval_rows = [i for i in range(rows) if not math.isnan(evals[i])]
        keep_evals = len(eval_rows) < KEPT_ROWS // 2
        keep = set(eval_rows) if keep_evals else set(eval_rows[::2])
        others = [i for i in range(rows) if math.isnan(evals[i])]
        for g in range(0, len(others), 4):
            group = others[g : g + 4]
            scored = [i for i in group if not math.isnan(loss[i])] or group
            keep.add(min(scored, key=loss.__getitem__))
            keep.add(max(scored, key=loss.__getitem__))
        order = sorted(keep)
        self.columns = {k: array("d", (c[i] for i in order)) for k, c in self.columns.items()}

    def page(self, after_step: int | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Up to `limit` records with step > after_step, in file order, and whether more
        follow (also when the index has not reached the end of the file yet); reads only
        blocks holding such a step, at most PAGE_BYTES of them."""
        with self.lock:
            offsets, steps = self.block_offsets[:], self.block_steps[:]
            consumed, complete = self.consumed, self.complete
        records: list[dict[str, Any]] = []
        spent, index, cut = 0, 0, False
        wanted = max(1, math.ceil((limit + 1) / BLOCK_RECORDS))
        while index < len(offsets) and len(records) <= limit and not cut:
            if after_step is not None and steps[index] <= after_step:
                index += 1  # no step of this block is wanted: not read (out-of-order steps)
                continue
            last = index + 1
            while (
                last < len(offsets)
                and last - index < wanted
                and (after_step is None or steps[last] > after_step)
            ):
                last += 1
            end = offsets[last] if last < len(offsets) else consumed
            if end - offsets[index] > PAGE_BYTES - spent:
                end, cut = offsets[index] + PAGE_BYTES - spent, True
            read = self.storage.read_range(METRICS_FILE, offsets[index], end=end)
            data = read.data or b""
            spent += len(data)
            self.bytes_read += len(data)
            for line in _complete_lines(data).splitlines():
                record = _record(line)
                if record is not None and (after_step is None or record["step"] > after_step):
                    records.append(record)
            index = last
        more = len(records) > limit or cut or not complete
        return records[:limit], more

    def downsampled(self, width: int) -> RunMetrics:
        """The figure's records, at most about 4 per horizontal pixel per series: each
        bucket of records keeps its first, last, lowest-loss and highest-loss record (spikes
        stay visible); every evaluation record is kept."""
        with self.lock:
            columns = {k: c[:] for k, c in self.columns.items()}
            count, config = self.count, self.config
        rows = len(columns["step"])
        buckets = max(1, width)
        keep: set[int] = set()
        eval_loss, loss = columns["eval_loss"], columns["loss"]
        if rows <= 4 * buckets:
            keep = set(range(rows))
        else:
            for b in range(buckets):
                lo, hi = b * rows // buckets, (b + 1) * rows // buckets
                if lo >= hi:
                    continue
                keep.update((lo, hi - 1))
                scored = [i for i in range(lo, hi) if not math.isnan(loss[i])]
                if scored:
                    keep.add(min(scored, key=loss.__getitem__))
                    keep.add(max(scored, key=loss.__getitem__))
            keep.update(i for i in range(rows) if not math.isnan(eval_loss[i]))
        records = []
        for i in sorted(keep):
            record = {k: c[i] for k, c in columns.items() if not math.isnan(c[i])}
            record["step"] = int(record["step"])
            records.append(record)
        return RunMetrics(self.run_id, records, config, count=count)


class MetricsFiles:
    """The MetricsFile of the runs looked at lately (a bounded number), refreshed on use."""

    def __init__(self, max_runs: int = 16, refresh_bytes: int | None = REFRESH_BYTES):
        self.max_runs = max_runs
        self.refresh_bytes = refresh_bytes
        self._files: OrderedDict[str, MetricsFile] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str, run_dir: str) -> MetricsFile:
        with self._lock:
            found = self._files.pop(run_dir, None) or MetricsFile(
                run_id, run_dir, self.refresh_bytes
            )
            self._files[run_dir] = found
            while len(self._files) > self.max_runs:
                self._files.popitem(last=False)
        return found.refresh()
