"""`data prepare` end to end: a slice of the sources through a pool of tokenizing processes
into shards, and the final step that commits the manifest.

The parent process reads and decompresses the sources (streamed), hands chunks of lines to
the workers (a bounded number in flight, so memory stays flat), and writes each chunk's result
as one train and one eval shard in source order. The held-out documents are every k-th
document of each source (k = round(1 / data.eval_fraction)), as the trainer holds them out of
a JSONL file: deterministic and independent of the seed, of the slicing and of the workers.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from trainer.data.prepare.encode import Encoded, encode_in_worker, init_worker
from trainer.data.prepare.output import Output
from trainer.data.prepare.plan import Plan, PrepareRequest, make_plan
from trainer.data.prepare.progress import Progress
from trainer.data.prepare.sources import default_workers, read_chunks
from trainer.data.shard_format import Manifest, Shard
from trainer.errors import ConfigError
from trainer.hf.load import fetch_tokenizer


def with_local_tokenizer(request: PrepareRequest) -> PrepareRequest:
    """An s3:// data.tokenizer is fetched once, here, before any worker starts (its files are
    small; the fingerprint hashes their contents, so it is the same as the local directory's)."""
    tokenizer = request.data.tokenizer
    if not tokenizer or not tokenizer.startswith("s3://"):
        return request

    local = fetch_tokenizer(tokenizer)
    return dataclasses.replace(request, data=dataclasses.replace(request.data, tokenizer=local))


@dataclass
class Summary:
    output: str
    nothing_to_do: bool = False
    sources: int = 0
    bytes_read: int = 0
    shards: list[Shard] = field(default_factory=list)
    malformed_lines: int = 0
    seconds: float = 0.0
    committed: bool = False

    def line(self) -> str:
        if self.nothing_to_do:
            return (
                f"data prepare: {self.output} is up to date (same sources, tokenizer and "
                "settings): nothing to do"
            )
        tokens = sum(s.tokens for s in self.shards)
        docs = {
            split: sum(s.documents for s in self.shards if s.split == split)
            for split in ("train", "eval")
        }
        rate = self.bytes_read / 1e6 / max(self.seconds, 1e-9)
        state = "committed" if self.committed else "slice landed, others pending"
        return (
            f"data prepare: {self.sources} sources ({self.bytes_read / 1e6:,.1f} MB) -> "
            f"{tokens:,} tokens, {docs['train']:,} train + {docs['eval']:,} eval documents in "
            f"{len(self.shards)} shards, {self.malformed_lines} malformed lines, "
            f"{self.seconds:.1f} s ({rate:,.1f} MB/s, {tokens / max(self.seconds, 1e-9):,.0f} "
            f"tokens/s); {state}: {self.output}"
        )


def prepare(request: PrepareRequest, progress: bool = True) -> Summary:
    """The whole prepare on this machine: every slice, then the commit."""
    request = with_local_tokenizer(request)
    start = time.monotonic()
    plan = make_plan(request)
    output = Output(request.to)
    if _committed(output, plan):
        return Summary(request.to, nothing_to_do=True)
    output.clean_uncommitted()
    summary = Summary(request.to)
    try:
        with Progress(sum(s.size for s in plan.sources), enabled=progress) as bar:
            for index in range(plan.slices):
                _slice(request, plan, output, index, bar, summary)
        _finalize(plan, output)
    except BaseException:
        output.clean_uncommitted()
        raise
    summary.seconds, summary.committed = time.monotonic() - start, True
    return summary


def run_slice(request: PrepareRequest, index: int, progress: bool = False) -> Summary:
    """One slice (an Indexed Job's pod): its shards and its marker; no manifest."""
    request = with_local_tokenizer(request)
    start = time.monotonic()
    plan = make_plan(request)
    if not 0 <= index < plan.slices:
        raise ConfigError(f"data prepare: slice index {index}; allowed: 0..{plan.slices - 1}")
    output = Output(request.to)
    if _committed(output, plan):
        return Summary(request.to, nothing_to_do=True)
    output.refuse_foreign()
    marker = output.read_marker(index, plan.slices)
    if marker is not None and marker["plan"] == plan.id:
        return Summary(request.to, nothing_to_do=True)  # a retried pod whose work landed
    if marker is not None:
        raise ConfigError(
            f"data prepare: {output.uri} holds an unfinished prepare of other sources, tokenizer "
            "or settings; wait for it or choose another output"
        )
    summary = Summary(request.to)
    size = sum(plan.sources[i].size for i in plan.assigned(index))
    with Progress(size, enabled=progress) as bar:
        _slice(request, plan, output, index, bar, summary)
    # The last slice to land commits: no controller has to wait for the others. Two slices
    # finishing together may both commit; the manifest is a function of the plan and the
    # markers, so both write the same bytes.
    if all(_landed(output, plan, i) for i in range(plan.slices)):
        _finalize(plan, output)
        summary.committed = True
    summary.seconds = time.monotonic() - start
    return summary


def finalize(request: PrepareRequest) -> Summary:
    """The commit after every slice landed: checks each slice's marker, writes the manifest."""
    request = with_local_tokenizer(request)
    start = time.monotonic()
    plan = make_plan(request)
    output = Output(request.to)
    if _committed(output, plan):
        return Summary(request.to, nothing_to_do=True)
    manifest = _finalize(plan, output)
    return Summary(
        request.to,
        sources=len(plan.sources),
        bytes_read=sum(s.size for s in plan.sources),
        shards=manifest.shards,
        malformed_lines=manifest.malformed_lines,
        seconds=time.monotonic() - start,
        committed=True,
    )


def _landed(output: Output, plan: Plan, index: int) -> bool:
    marker = output.read_marker(index, plan.slices)
    return marker is not None and marker["plan"] == plan.id


def _committed(output: Output, plan: Plan) -> bool:
    manifest = output.manifest()
    return manifest is not None and plan.matches(manifest, output.uri)


def _finalize(plan: Plan, output: Output) -> Manifest:
    shards, malformed, waiting = [], 0, []
    for index in range(plan.slices):
        marker = output.read_marker(index, plan.slices)
        if marker is None or marker["plan"] != plan.id:
            waiting.append(index)
            continue
        shards += [Shard(**s) for s in marker["shards"]]
        malformed += marker["malformed_lines"]
    if waiting:
        raise ConfigError(
            f"data prepare: slices {waiting} of {plan.slices} have not finished under "
            f"{output.uri} (or were prepared from other sources); nothing committed"
        )
    if not any(s.documents for s in shards):
        raise ConfigError(
            f"data.path: the {len(plan.sources)} sources (first: {plan.sources[0].uri!r}) hold "
            f"no documents; check data.format={plan.data_format!r} and its field names"
        )
    shards.sort(key=lambda s: (s.split, s.name))
    manifest = Manifest(
        dtype=plan.dtype,
        vocab_size=plan.vocab_size,
        tokenizer_fingerprint=plan.fingerprint,
        data_format=plan.data_format,
        isolate_documents=plan.isolate_documents,
        sources=plan.sources,
        shards=shards,
        malformed_lines=malformed,
        settings=plan.settings,
    )
    output.commit(manifest)
    return manifest


@dataclass
class _SourceState:
    documents: int = 0
    lines: int = 0
    bad: int = 0
    first_bad: str = ""


def _slice(
    request: PrepareRequest,
    plan: Plan,
    output: Output,
    index: int,
    bar: Progress,
    summary: Summary,
) -> None:
    assigned = plan.assigned(index)
    written: list[Shard] = []
    every = round(1 / request.data.eval_fraction) if request.data.eval_fraction > 0 else 0
    states = {i: _SourceState() for i in assigned}
    try:
        with _pool(request) as pool:
            for source_index, chunk, encoded in _encoded(request, plan, assigned, pool, bar):
                state = states[source_index]
                shards = _split(
                    plan, f"{source_index:05d}-{chunk:05d}", encoded, state.documents, every
                )
                for shard, arrays in shards:
                    output.write_shard(shard, plan.dtype, *arrays)
                    written.append(shard)
                state.documents += len(encoded.lengths)
                state.lines += encoded.lines
                state.bad += encoded.bad
                state.first_bad = state.first_bad or encoded.first_bad
                bar.tokens(len(encoded.tokens))
        for i, state in states.items():
            _check_bad(request, plan.sources[i].uri, state)
        output.write_marker(
            index, plan.slices, plan.id, written, sum(s.bad for s in states.values())
        )
    except BaseException:
        output.discard(written)  # this slice's shards; others' stay for their own commit
        raise
    summary.sources += len(assigned)
    summary.bytes_read += sum(plan.sources[i].size for i in assigned)
    summary.shards += written
    summary.malformed_lines += sum(s.bad for s in states.values())


def _check_bad(request: PrepareRequest, uri: str, state: _SourceState) -> None:
    limit = request.data.max_bad_fraction
    if state.bad and state.bad > limit * state.lines:
        raise ConfigError(
            f"data.path: {state.bad} of {state.lines} lines "
            f"({100 * state.bad / state.lines:.1f}%) of {uri!r} are not "
            f"{request.data.format} records (first: {state.first_bad}); "
            f"data.max_bad_fraction allows {limit}"
        )


def _split(
    plan: Plan, name: str, encoded: Encoded, first_document: int, every: int
) -> list[tuple[Shard, tuple]]:
    """The chunk as a train shard and an eval shard (each only when it holds a document)."""
    held_out = np.zeros(len(encoded.lengths), dtype=bool)
    if every > 0:
        numbers = np.arange(first_document, first_document + len(encoded.lengths))
        held_out = numbers % every == every - 1
    per_token = np.repeat(held_out, encoded.lengths)
    out = []
    for split, docs, tokens in (("train", ~held_out, ~per_token), ("eval", held_out, per_token)):
        if not docs.any():
            continue
        arrays = (
            encoded.tokens[tokens],
            encoded.lengths[docs],
            encoded.mask[tokens] if encoded.mask is not None else None,
        )
        shard = Shard(split, name, len(arrays[0]), int(docs.sum()), plan.has_mask)
        out.append((shard, arrays))
    return out


def _pool(request: PrepareRequest) -> ProcessPoolExecutor:
    workers = request.workers or default_workers()
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    return ProcessPoolExecutor(workers, context, initializer=init_worker, initargs=(request.data,))


def _encoded(
    request: PrepareRequest,
    plan: Plan,
    assigned: list[int],
    pool: ProcessPoolExecutor,
    bar: Progress,
) -> Iterator[tuple[int, int, Encoded]]:
    """(source index, chunk number, result) in source order, with a bounded window in flight."""
    window = 2 * (request.workers or default_workers())
    chunk_bytes = int(request.chunk_mb * (1 << 20))
    pending: deque[tuple[int, int, Future]] = deque()
    for source_index in assigned:
        source, read_before = plan.sources[source_index], 0
        for chunk, (lines, read) in enumerate(read_chunks(source, chunk_bytes)):
            bar.read(read - read_before)
            read_before = read
            pending.append((source_index, chunk, pool.submit(encode_in_worker, lines)))
            while len(pending) >= window:
                done = pending.popleft()
                yield done[0], done[1], done[2].result()
        bar.read(source.size - read_before)
    while pending:
        done = pending.popleft()
        yield done[0], done[1], done[2].result()
