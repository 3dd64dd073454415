"""A committed DCP checkpoint of a run -> a Hugging Face Llama directory.

No process group and no model: the checkpoint is read a shard's worth of full tensors at a
time (`dcp_read`: each saved chunk with one read straight into its rows), each batch written
as one safetensors shard by safetensors' own serializer from those tensors in place (no
serialized copy) and dropped; the next shard is read while one is written, so peak memory is
two shards, never the model. Written next to the destination
under a temporary name and committed last: a local export is renamed into place; on S3 the
weights and tokenizer land first, then the index, then config.json — an export cut short has
no config.json, so no loader takes it for a model.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import shutil
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from contract import run_dir as run_layout
from contract.checkpoints import METADATA, step_dir
from contract.config import RunConfig
from contract.model.args import ModelArgs, model_args_from_config
from contract.model.hf_config import CONFIG_FILE, model_args_from_hf
from trainer.checkpoint.layout import committed_steps
from trainer.errors import ConfigError
from trainer.hf.config import hf_config_from_args
from trainer.hf.dcp_read import CheckpointTensors
from trainer.hf.export_lora import (
    ADAPTER_CONFIG,
    run_lora,
    save_weights,
    write_adapter,
    write_merged,
)
from trainer.hf.load import RUN_HF_DIR, TOKENIZER_FILES, staging_dir
from trainer.hf.weights import INDEX_FILE, hf_name, trainer_names
from trainer.storage import RunStorage, StorageError, StorageNotFoundError, open_run_storage
from trainer.tokenizer.byte import ByteTokenizer, hf_files

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DEFAULT_SHARD_BYTES = 2 * 2**30
"""Peak memory is two shards (the one written, the next one being read), so shards stay
well below a model's size: 8 files for Llama 3 8B in bf16."""
GENERATION_CONFIG = "generation_config.json"


@dataclass(frozen=True)
class ExportResult:
    destination: str
    step: int
    files: int
    bytes_written: int


def choose_step(storage: RunStorage, step: int | None) -> int:
    steps = committed_steps(storage)
    if not steps:
        raise ConfigError(f"--step: {storage.root} has no committed checkpoint")
    if step is None:
        return steps[-1]
    if step not in steps:
        listed = ", ".join(map(str, steps))
        raise ConfigError(f"--step: no committed checkpoint at step {step}; committed: {listed}")
    return step


def run_model(storage: RunStorage) -> tuple[ModelArgs, dict | None]:
    """The run's architecture and its source config.json (None when it started from scratch)."""
    try:
        base = json.loads(storage.read_text(f"{RUN_HF_DIR}/{CONFIG_FILE}"))
    except StorageNotFoundError:
        base = None
    if base is not None:
        return model_args_from_hf(base, storage.uri(RUN_HF_DIR)), base
    try:
        saved = OmegaConf.create(storage.read_text(run_layout.CONFIG_FILE))
    except StorageNotFoundError:
        raise ConfigError(f"RUN: {storage.root} has no config.yaml (not a run dir)") from None
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), saved))
    return model_args_from_config(cfg.model), None  # type: ignore[union-attr]


def check_destination(dest: str, replace: bool) -> None:
    if replace:
        return
    if "://" in dest:
        if open_run_storage(dest).list_dir(""):
            raise ConfigError(f"--to: {dest} already holds files; allowed: an empty prefix")
    elif Path(dest).exists() and (not Path(dest).is_dir() or any(Path(dest).iterdir())):
        raise ConfigError(f"--to: {dest} already exists and is not empty; allowed: a new path")


def export_run(
    run_dir: str,
    dest: str,
    *,
    step: int | None = None,
    dtype: str = "bf16",
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    replace: bool = False,
    merge: bool = False,
) -> ExportResult:
    """Write checkpoint `step` (default: the newest committed) of `run_dir` to `dest`. A LoRA
    run writes a PEFT adapter, or with `merge` its base with the adapters folded in."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype: {dtype!r} is not allowed; allowed: {', '.join(DTYPES)}")
    lora = None
    try:
        storage = open_run_storage(run_dir)
        step = choose_step(storage, step)
        args, base = run_model(storage)
        lora = run_lora(storage)
        check_destination(dest, replace)
    except StorageError as exc:
        raise ConfigError(f"RUN: {exc}") from None
    work = Path(tempfile.mkdtemp(prefix="trainstack-export-", dir=_staging_root()))
    out = _output_dir(dest, work)
    try:
        if merge and lora is None:
            raise ConfigError("--merge: the run is a full fine-tune (no model.lora.rank)")
        checkpoint = _local_checkpoint(storage, step, work / "checkpoint")
        byte = uses_byte_tokenizer(storage)
        if lora is not None and not merge:
            written = write_adapter(checkpoint, lora, DTYPES[dtype], out)
            _write_tokenizer(storage, args, byte, out)
        else:
            if lora is not None:
                written = write_merged(checkpoint, lora, DTYPES[dtype], out, work)
            else:
                written = _write_weights(checkpoint, args, DTYPES[dtype], out, max_shard_bytes)
            _write_metadata_files(storage, args, base, dtype, byte, out)
        files = len(os.listdir(out))
        shutil.rmtree(work / "checkpoint", ignore_errors=True)
        _commit(out, dest, replace)
        return ExportResult(dest, step, files, written)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)  # gone already unless the export failed


def export_tokenizer(run_dir: str, out: Path) -> None:
    """Only the tokenizer files an export of `run_dir` would hold, into the directory `out`
    (what a client of a served model needs to count tokens)."""
    try:
        storage = open_run_storage(run_dir)
        args, _ = run_model(storage)
        _write_tokenizer(storage, args, uses_byte_tokenizer(storage), out)
    except StorageError as exc:
        raise ConfigError(f"RUN: {exc}") from None


def _staging_root() -> str:
    root = staging_dir("export", "").parent
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


def _output_dir(dest: str, work: Path) -> Path:
    """Where the files are written before the commit: for a local destination a hidden
    sibling of it (same filesystem, so the commit is one rename), else the work dir."""
    if "://" in dest:
        out = work / "out"
    else:
        final = Path(dest)
        out = final.with_name(f".{final.name}.partial-{uuid.uuid4().hex[:8]}")
    out.mkdir(parents=True)
    return out


def _local_checkpoint(storage: RunStorage, step: int, cache: Path) -> Path:
    local = storage.local_path(step_dir(step))
    if local is not None:
        return local
    storage.download_dir(step_dir(step), cache)
    return cache


def _write_weights(
    checkpoint: Path, args: ModelArgs, dtype: torch.dtype, out: Path, max_shard_bytes: int
) -> int:
    metadata = pickle.loads((checkpoint / METADATA).read_bytes())
    keys = {name: f"model.{name}" for name in trainer_names(args)}
    absent = [key for key in keys.values() if key not in metadata.state_dict_metadata]
    if absent:
        raise ConfigError(f"RUN: checkpoint {checkpoint.name} lacks {absent[0]!r}")
    tensors = CheckpointTensors(checkpoint, metadata)
    shards: list[list[str]] = [[]]
    sizes = [0]
    for name in keys:
        nbytes = math.prod(tensors.shape(keys[name])) * dtype.itemsize
        if shards[-1] and sizes[-1] + nbytes > max_shard_bytes:
            shards.append([])
            sizes.append(0)
        shards[-1].append(name)
        sizes[-1] += nbytes
    # Two flat buffers of the largest shard's size, taken in turn: a shard's tensors are
    # non-overlapping views into one (as safetensors requires), so after the first two shards
    # nothing is allocated or faulted in again.
    arenas = [torch.empty(max(sizes), dtype=torch.uint8) for _ in range(min(2, len(shards)))]

    def read_shard(index: int) -> dict[str, torch.Tensor]:
        arena, offset, shard = arenas[index % len(arenas)], 0, {}
        for name in shards[index]:
            shape = tensors.shape(keys[name])
            nbytes = math.prod(shape) * dtype.itemsize
            shard[hf_name(name)] = arena[offset : offset + nbytes].view(dtype).view(shape)
            tensors.read_into(keys[name], shard[hf_name(name)])
            offset += nbytes
        return shard

    # Reading shard i+1 (into the other buffer) overlaps writing shard i.
    weight_map, total = {}, 0
    with tensors, ThreadPoolExecutor(max_workers=1, thread_name_prefix="export-read") as pool:
        pending = pool.submit(read_shard, 0)
        for index in range(1, len(shards) + 1):
            shard = pending.result()
            if index < len(shards):
                pending = pool.submit(read_shard, index)
            file_name = f"model-{index:05d}-of-{len(shards):05d}.safetensors"
            _save_shard(shard, out / file_name)
            total += sum(t.numel() * t.element_size() for t in shard.values())
            weight_map.update(dict.fromkeys(shard, file_name))
    index_doc = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / INDEX_FILE).write_text(json.dumps(index_doc, indent=2) + "\n")
    return total


def _save_shard(tensors: dict[str, torch.Tensor], path: Path) -> None:
    save_weights(tensors, path)


def uses_byte_tokenizer(storage: RunStorage) -> bool:
    """Whether the run trained on the built-in byte tokenizer: `data.tokenizer=byte`, or null
    (the init_from checkpoint's own) with no tokenizer file kept in `<run_dir>/hf/`."""
    try:
        saved = OmegaConf.create(storage.read_text(run_layout.CONFIG_FILE))
    except StorageNotFoundError:
        return False
    name = OmegaConf.select(saved, "data.tokenizer")
    if name == "byte":
        return True
    return name is None and not set(storage.list_dir(RUN_HF_DIR)) & set(TOKENIZER_FILES)


def _write_tokenizer(storage: RunStorage, args: ModelArgs, byte: bool, out: Path) -> None:
    """The tokenizer files the run trained with: the byte tokenizer's `tokenizer.json` (it has
    no files of its own), else the ones kept in `<run_dir>/hf/`."""
    if byte:
        for name, text in hf_files(args.max_seq_len).items():
            (out / name).write_text(text)
        return
    for name in TOKENIZER_FILES:
        try:
            (out / name).write_bytes(storage.read_bytes(f"{RUN_HF_DIR}/{name}"))
        except StorageNotFoundError:
            continue


def _write_metadata_files(
    storage: RunStorage, args: ModelArgs, base: dict | None, dtype: str, byte: bool, out: Path
) -> None:
    _write_tokenizer(storage, args, byte, out)
    config = hf_config_from_args(args, base, dtype)
    if byte:  # the source's token ids (if any) name another tokenizer's tokens
        config.pop("bos_token_id", None)
        config.update(eos_token_id=ByteTokenizer.eos_id, pad_token_id=None)
    ids = {k: config[k] for k in ("bos_token_id", "eos_token_id") if k in config}
    generation = (json.dumps(ids, indent=2) + "\n").encode()
    if not byte:
        with contextlib.suppress(StorageNotFoundError):
            generation = storage.read_bytes(f"{RUN_HF_DIR}/{GENERATION_CONFIG}")
    (out / GENERATION_CONFIG).write_bytes(generation)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _commit(out: Path, dest: str, replace: bool) -> None:
    if "://" in dest:
        target = open_run_storage(dest)
        if replace:
            for name in target.list_dir(""):
                target.delete_tree(name)
        last = [n for n in (INDEX_FILE, CONFIG_FILE, ADAPTER_CONFIG) if (out / n).is_file()]
        first = sorted(p for p in out.iterdir() if p.name not in last)
        for path in [*first, *(out / name for name in last)]:
            target.upload_file(path, path.name)
        return
    final = Path(dest)
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
        final.rename(old)
    out.rename(final)  # the commit: one rename
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
